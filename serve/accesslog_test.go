package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"pistil/exec"
)

// logBuffer collects JSON log lines from an hclog logger, safe for the server's
// goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the log records whose @module is module.
func (b *logBuffer) lines(t testing.TB, module string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["@module"] == module {
			out = append(out, rec)
		}
	}
	return out
}

func jsonLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "pistil.serve", JSONFormat: true, Output: w, Level: hclog.Debug})
}

// TestAccessLogLine: every request gets one line on pistil.serve.http with its route,
// status and duration; generations add prompt, cached and generated tokens and both
// speeds; a client that goes away is logged as disconnected.
func TestAccessLogLine(t *testing.T) {
	var logs logBuffer
	ts := startServer(t, func(c *Config) { c.Logger = jsonLogger(&logs) })
	body := chatBody("Tell me about access logs.", map[string]any{"max_tokens": 5})
	first := ts.chat(t, body)
	second := ts.chat(t, body) // the same prompt again: served from the prefix cache
	if second.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatalf("the repeated prompt was not cached: %+v", second.Usage)
	}
	if status, _, _ := ts.do(t, "GET", "/health", nil, nil); status != 200 {
		t.Fatalf("health %d", status)
	}
	if status, _, _ := ts.post(t, "/v1/chat/completions", `{"model":`); status != 400 {
		t.Fatalf("bad JSON: %d", status)
	}

	// A stream whose client leaves after the first event.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","stream":true,"max_tokens":100000,"temperature":0,"messages":[{"role":"user","content":"go on"}]}`))
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()

	var access []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if access = logs.lines(t, "pistil.serve.http"); len(access) == 5 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(access) != 5 {
		t.Fatalf("%d access lines, want 5: %v", len(access), access)
	}
	num := func(rec map[string]any, key string) float64 {
		v, ok := rec[key].(float64)
		if !ok {
			t.Errorf("%v lacks the number %s", rec, key)
		}
		return v
	}
	for i, resp := range []chatResp{first, second} {
		rec := access[i]
		if rec["@message"] != "request" || rec["route"] != "chat.completions" || num(rec, "status") != 200 || rec["client_disconnected"] != false {
			t.Errorf("line %d: %v", i, rec)
		}
		if num(rec, "prompt_tokens") != float64(resp.Usage.PromptTokens) || num(rec, "cached_tokens") != float64(resp.Usage.PromptTokensDetails.CachedTokens) ||
			num(rec, "generated_tokens") != float64(resp.Usage.CompletionTokens) {
			t.Errorf("line %d %v disagrees with the response's usage %+v", i, rec, resp.Usage)
		}
		// The second request's prompt is all cached: nothing is prefilled.
		if num(rec, "decode_tok_s") <= 0 || (num(rec, "prefill_tok_s") <= 0) != (i == 1) {
			t.Errorf("line %d: speeds %v", i, rec)
		}
		if d, err := time.ParseDuration(rec["duration"].(string)); err != nil || d <= 0 {
			t.Errorf("line %d: duration %v", i, rec["duration"])
		}
		if id, _ := rec["request_id"].(string); !strings.HasPrefix(id, "req_") {
			t.Errorf("line %d: request id %v", i, rec["request_id"])
		}
	}
	if rec := access[2]; rec["route"] != "health" || rec["@level"] != "debug" || rec["prompt_tokens"] != nil {
		t.Errorf("health line: %v", rec)
	}
	if rec := access[3]; num(rec, "status") != 400 || rec["prompt_tokens"] != nil {
		t.Errorf("bad request line: %v", rec)
	}
	// The stream's 200 went out with its headers; the line says the client left, with the
	// 499 /metrics counts.
	if rec := access[4]; rec["client_disconnected"] != true || num(rec, "status") != statusClientClosed || rec["prompt_tokens"] == nil {
		t.Errorf("disconnect line: %v", rec)
	}
}

// TestEngineErrorIsLogged: a generation the engine fails (here: its model was closed
// under the server, so every step fails) is logged on pistil.serve.engine with the request
// and the error, and its access line has the 500.
func TestEngineErrorIsLogged(t *testing.T) {
	var logs logBuffer
	model, err := exec.Open(tiny.dir, exec.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerWith(t, model, func(c *Config) { c.Logger = jsonLogger(&logs) })
	model.Close()
	status, _, data := ts.post(t, "/v1/chat/completions", chatBody("fail please", map[string]any{"max_tokens": 20}))
	if status != 500 || !strings.Contains(string(data), "closed") {
		t.Fatalf("status %d: %s", status, data)
	}
	engine := logs.lines(t, "pistil.serve.engine")
	if len(engine) != 1 || engine[0]["@level"] != "error" || !strings.Contains(engine[0]["error"].(string), "closed") ||
		!strings.HasPrefix(engine[0]["request"].(string), "chatcmpl-") {
		t.Errorf("engine log: %v", engine)
	}
	access := logs.lines(t, "pistil.serve.http")
	if len(access) != 1 || access[0]["status"] != float64(500) {
		t.Errorf("access log: %v", access)
	}
}

// TestProcessMetrics: /metrics carries the standard process and Go runtime metrics
// beside the server's own, with plausible values.
func TestProcessMetrics(t *testing.T) {
	ts := startServer(t, nil)
	ts.chat(t, chatBody("hi", nil))
	status, _, data := ts.do(t, "GET", "/metrics", nil, nil)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("metrics line %q", line)
		}
		if _, dup := values[name]; dup {
			t.Errorf("%s appears twice", name)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		values[name] = v
	}
	for name, ok := range map[string]func(float64) bool{
		"process_resident_memory_bytes": func(v float64) bool { return v > 1<<20 },
		"process_virtual_memory_bytes":  func(v float64) bool { return v > 1<<20 },
		"process_open_fds":              func(v float64) bool { return v >= 3 },
		"process_max_fds":               func(v float64) bool { return v >= 3 },
		"process_cpu_seconds_total":     func(v float64) bool { return v > 0 },
		"process_start_time_seconds":    func(v float64) bool { return v > 1.6e9 },
		"go_goroutines":                 func(v float64) bool { return v >= 2 },
		"go_threads":                    func(v float64) bool { return v >= 1 },
		"go_memstats_heap_alloc_bytes":  func(v float64) bool { return v > 0 },
		"pistil_tokens_predicted_total": func(v float64) bool { return v >= 1 },
		"pistil_ready":                  func(v float64) bool { return v == 1 },
	} {
		v, present := values[name]
		if !present || !ok(v) {
			t.Errorf("%s = %v (present %v)", name, v, present)
		}
	}
}
