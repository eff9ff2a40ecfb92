package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var fuzzSeeds = []string{
	``, `{}`, `[]`, `null`, `"x"`, `{"messages":`,
	`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
	`{"model":"tiny","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
	`{"model":"tiny","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","stop":["a","b"],"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.1,"seed":3,"stream":true,"stream_options":{"include_usage":true},"chat_template_kwargs":{"enable_thinking":false,"preserve_thinking":true},"reasoning_effort":"low","max_completion_tokens":3}`,
	`{"model":"tiny","prompt":[1,2,3],"max_tokens":2}`,
	`{"model":"tiny","prompt":"hello","echo":false,"best_of":1}`,
	`{"model":"tiny","messages":[{"role":"user","content":"\ud800"}],"seed":1e300}`,
}

// FuzzRequestDecoder: no body makes the decoder or the request preparation (template,
// tokenizer, context check) panic or answer with anything but a 4xx.
func FuzzRequestDecoder(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	ts := startServer(f, func(c *Config) { c.Context = 256 })
	f.Fuzz(func(t *testing.T, body []byte) {
		slow := time.AfterFunc(2*time.Second, func() { panic(fmt.Sprintf("slow input %q", body)) })
		defer slow.Stop()
		if req, e := parseChatRequest(body); e != nil {
			checkClientError(t, e, body)
		} else if _, e := ts.prepareChat(req); e != nil {
			checkClientError(t, e, body)
		}
		if req, e := parseCompletionRequest(body); e != nil {
			checkClientError(t, e, body)
		} else if _, e := ts.prepareCompletion(req); e != nil {
			checkClientError(t, e, body)
		}
	})
}

func checkClientError(t *testing.T, e *apiError, body []byte) {
	t.Helper()
	if e.Status < 400 || e.Status >= 500 || e.Message == "" {
		t.Fatalf("body %q: error %d %q", body, e.Status, e.Message)
	}
}

// FuzzHandler sends each body through the whole HTTP handler (both completion routes,
// streamed or not as the body says): never a panic, never a 5xx, always an OpenAI error
// object or a complete answer. The context is small so that valid bodies generate little.
func FuzzHandler(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	ts := startServer(f, func(c *Config) { c.Context = 48 })
	h := ts.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			req := httptest.NewRequest("POST", path, bytes.NewReader(body))
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body.String())
			}
			if rec.Code != 200 {
				var e apiErr
				if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Message == "" {
					t.Fatalf("%s %q: %d without an error object: %s", path, body, rec.Code, rec.Body.String())
				}
			} else if ct := rec.Header().Get("Content-Type"); ct == "text/event-stream" && !strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
				t.Fatalf("%s %q: stream does not end with [DONE]", path, body)
			}
		}
	})
}
