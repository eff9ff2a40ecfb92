package serve

import (
	"net/http"
	"testing"
)

// S2: with an API key, every route but /health needs it; the key is compared exactly.
func TestAPIKey(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.APIKey = "sekret" })
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}, {"Authorization": "Bearer sekret2"}} {
		status, hdr, data := ts.do(t, "GET", "/v1/models", nil, h)
		e := wantError(t, status, hdr, data, 401, "")
		if e.Error.Code == nil || *e.Error.Code != "invalid_api_key" {
			t.Fatalf("code %v", e.Error.Code)
		}
	}
	status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("hi", nil))
	wantError(t, status, hdr, data, 401, "")
	for _, h := range []map[string]string{{"Authorization": "Bearer sekret"}, {"X-Api-Key": "sekret"}} {
		if status, _, data := ts.do(t, "GET", "/v1/models", nil, h); status != 200 {
			t.Fatalf("%v: %d %s", h, status, data)
		}
	}
	if status, _, data := ts.do(t, "POST", "/v1/chat/completions", chatBody("hi", nil), map[string]string{"Authorization": "Bearer sekret"}); status != 200 {
		t.Fatalf("authorized chat: %d %s", status, data)
	}
	if status, _, _ := ts.do(t, "GET", "/health", nil, nil); status != 200 {
		t.Fatalf("/health needs no key, got %d", status)
	}
}

// S3: DNS rebinding (a foreign Host) is refused; no CORS unless configured.
func TestHostAndOrigin(t *testing.T) {
	ts := startServer(t, nil)
	get := func(host, origin, method string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, ts.URL+"/v1/models", nil)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		return resp, buf[:n]
	}
	for _, host := range []string{"evil.example.com", "evil.example.com:8080", "attacker.localhost.evil.com"} {
		resp, data := get(host, "", "GET")
		wantError(t, resp.StatusCode, resp.Header, data, 403, "")
	}
	for _, host := range []string{"localhost:1234", "127.0.0.1", "[::1]:80", "app.localhost"} {
		if resp, data := get(host, "", "GET"); resp.StatusCode != 200 {
			t.Fatalf("host %s: %d %s", host, resp.StatusCode, data)
		}
	}
	for _, method := range []string{"OPTIONS", "GET"} {
		resp, data := get("", "http://evil.example.com", method)
		if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s from a foreign origin: %d, ACAO %q: %s", method, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), data)
		}
	}

	open := startServer(t, func(c *Config) {
		c.CORSOrigins = []string{"http://app.example.com"}
		c.AllowedHosts = []string{"llm.lan"}
	})
	ts = open
	resp, _ := get("", "http://app.example.com", "OPTIONS")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://app.example.com" {
		t.Fatalf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, data := get("llm.lan:8080", "", "GET"); resp.StatusCode != 200 {
		t.Fatalf("allowed host: %d %s", resp.StatusCode, data)
	}
}
