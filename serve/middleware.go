package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// middleware applies, in order: panic recovery, a request id, the Host check against DNS
// rebinding, CORS, and the API key. Each rejection is an OpenAI error object.
func (s *Server) middleware(next http.Handler) http.Handler {
	keyDigest := sha256.Sum256([]byte(s.cfg.APIKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.cfg.Logger.Error("panic serving request", "path", r.URL.Path, "panic", v)
				// Headers may already be out; then this write is dropped by net/http.
				writeError(w, internalError("internal server error"))
			}
		}()
		w.Header().Set("X-Request-Id", newID("req_"))

		if !s.hostAllowed(r.Host) {
			writeError(w, &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "host_not_allowed",
				Message: "Host header not allowed; start the server with --allowed-hosts to accept it"})
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !s.originAllowed(origin) {
				writeError(w, &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "origin_not_allowed",
					Message: "cross-origin request not allowed; start the server with --cors to accept this origin"})
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, X-Stainless-Os, X-Stainless-Lang, X-Stainless-Package-Version, X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Arch, X-Stainless-Retry-Count, X-Stainless-Timeout, OpenAI-Organization, OpenAI-Project")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if s.cfg.APIKey != "" && r.URL.Path != "/health" {
			given := r.Header.Get("X-Api-Key")
			if auth := r.Header.Get("Authorization"); auth != "" {
				given = ""
				if scheme, token, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
					given = strings.TrimSpace(token)
				}
			}
			digest := sha256.Sum256([]byte(given))
			// Compare digests so that the comparison time depends on neither key's length.
			if given == "" || subtle.ConstantTimeCompare(digest[:], keyDigest[:]) != 1 {
				writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
					Message: "Incorrect or missing API key: send it as Authorization: Bearer <key>"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed defends against DNS rebinding: a browser page on an attacker's name that
// resolves to 127.0.0.1 sends that name as Host. IP literals and localhost names cannot
// be rebound, so they pass; any other name must be listed in AllowedHosts.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if h := strings.ToLower(s.cfg.Host); h != "" && host == h {
		return true
	}
	for _, a := range s.cfg.AllowedHosts {
		if a == "*" || strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.cfg.CORSOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}
