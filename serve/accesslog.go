package serve

import (
	"net/http"
	"time"
)

// accessRecord is what one request did, for its access log line: the route and status
// from the router, the token counts and speeds from the exchange that ran it.
type accessRecord struct {
	ran                       bool
	prompt, cached, generated int
	prefillTPS, decodeTPS     float64
	engineErr                 error
}

// noteGeneration attaches a finished (or abandoned) generation to the request's record.
func noteGeneration(w http.ResponseWriter, res genResult, runErr error) {
	r, ok := w.(*statusRecorder)
	if !ok {
		return
	}
	a := &r.access
	a.ran = true
	a.prompt, a.cached, a.generated = res.PromptTokens, res.CachedTokens, len(res.Tokens)
	if res.PrefillTime > 0 {
		a.prefillTPS = float64(res.Prefilled) / res.PrefillTime.Seconds()
	}
	if res.DecodeTime > 0 && len(res.Tokens) > 1 {
		a.decodeTPS = float64(len(res.Tokens)-1) / res.DecodeTime.Seconds()
	}
	a.engineErr = runErr
}

// logAccess writes the request's access line on the pistil.serve.http logger: API routes
// at info, health and metrics probes at debug (they come every few seconds).
func (s *Server) logAccess(route string, r *http.Request, rec *statusRecorder, start time.Time) {
	status := rec.statusOrOK()
	disconnected := status == statusClientClosed || r.Context().Err() != nil
	args := []any{"route", route, "method", r.Method, "status", status,
		"duration", time.Since(start).Round(time.Microsecond).String(), "client_disconnected", disconnected,
		"request_id", rec.Header().Get("X-Request-Id")}
	if a := rec.access; a.ran {
		args = append(args, "prompt_tokens", a.prompt, "cached_tokens", a.cached, "generated_tokens", a.generated,
			"prefill_tok_s", round1(a.prefillTPS), "decode_tok_s", round1(a.decodeTPS))
	}
	if route == "health" || route == "metrics" {
		s.httpLog.Debug("request", args...)
		return
	}
	s.httpLog.Info("request", args...)
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
