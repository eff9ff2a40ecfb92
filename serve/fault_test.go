package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"pistil/exec"
)

// waitTraces waits until n generations have finished.
func waitTraces(t testing.TB, ts *testServer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ts.traceCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d generations finished, want %d", ts.traceCount(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// F1: a client that drops a stream after a few chunks stops the engine within one decode
// step; the next request is served at once.
func TestDisconnectMidStream(t *testing.T) {
	ts := startServer(t, nil)
	before := ts.traceCount()
	streamUntil(t, ts, chatBody("Tell me everything", map[string]any{"max_tokens": 300, "ignore_eos": true}), 5)
	waitTraces(t, ts, before+1)
	g := ts.lastTrace(t)
	if !errors.Is(g.Err, context.Canceled) {
		t.Fatalf("generation ended with %v, want cancelled", g.Err)
	}
	if g.Result.StepsAfterCancel < 0 || g.Result.StepsAfterCancel > 1 {
		t.Fatalf("%d decode steps after the client left", g.Result.StepsAfterCancel)
	}
	if n := len(g.Result.Tokens); n >= 300 {
		t.Fatalf("ran to the end (%d tokens)", n)
	}
	waitIdle(t, ts)
	ts.chat(t, chatBody("next", map[string]any{"max_tokens": 2}))
}

// F2: a client that leaves during prefill stops it between chunks; nothing is generated.
func TestDisconnectDuringPrefill(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.CacheBytes = -1 })
	long := strings.Repeat("a long prompt that takes a while to prefill ", 40)
	for _, stream := range []bool{false, true} {
		before := ts.traceCount()
		raw, _ := json.Marshal(chatBody(long, map[string]any{"max_tokens": 50, "stream": stream}))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := ts.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		waitRunning(t, ts)
		time.Sleep(30 * time.Millisecond) // into the prefill
		cancel()
		<-done
		waitTraces(t, ts, before+1)
		g := ts.lastTrace(t)
		if !errors.Is(g.Err, context.Canceled) {
			t.Fatalf("stream=%v: ended with %v", stream, g.Err)
		}
		if len(g.Result.Tokens) != 0 {
			t.Fatalf("stream=%v: %d tokens generated after the client left during prefill", stream, len(g.Result.Tokens))
		}
		if g.Result.Prefilled >= g.Result.PromptTokens {
			t.Fatalf("stream=%v: the whole prompt (%d tokens) was prefilled; prefill was not cut short", stream, g.Result.PromptTokens)
		}
		waitIdle(t, ts)
	}
}

// F3: a client that leaves while queued is removed from the queue and never runs.
func TestDisconnectWhileQueued(t *testing.T) {
	ts := startServer(t, nil)
	before := ts.traceCount()
	blocker := make(chan struct{})
	go func() {
		defer close(blocker)
		ts.post(t, "/v1/chat/completions", chatBody("blocker", map[string]any{"max_tokens": 200, "ignore_eos": true}))
	}()
	waitRunning(t, ts)
	for _, stream := range []bool{false, true} {
		raw, _ := json.Marshal(chatBody("queued", map[string]any{"max_tokens": 2, "stream": stream}))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := ts.client.Do(req); err == nil {
				if stream {
					// Headers and the role chunk arrive while queued.
					line, _ := bufio.NewReader(resp.Body).ReadString('\n')
					if !strings.Contains(line, `"role":"assistant"`) {
						t.Errorf("queued stream's first line %q", line)
					}
					<-ctx.Done()
				}
				resp.Body.Close()
			}
		}()
		deadline := time.Now().Add(5 * time.Second)
		for d, _ := ts.sched.depth(); d == 0; d, _ = ts.sched.depth() {
			if time.Now().After(deadline) {
				t.Fatal("request never queued")
			}
			time.Sleep(time.Millisecond)
		}
		if stream {
			time.Sleep(20 * time.Millisecond) // let the role chunk arrive
		}
		cancel()
		<-done
		deadline = time.Now().Add(5 * time.Second)
		for d, _ := ts.sched.depth(); d != 0; d, _ = ts.sched.depth() {
			if time.Now().After(deadline) {
				t.Fatal("cancelled request stayed in the queue")
			}
			time.Sleep(time.Millisecond)
		}
	}
	<-blocker
	waitIdle(t, ts)
	if n := ts.traceCount() - before; n != 1 {
		t.Fatalf("%d generations ran, want only the blocker", n)
	}
}

// F8: while loading, /health and completions answer 503 with Retry-After; then 200.
func TestHealthWhileLoading(t *testing.T) {
	s := New(testConfig())
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	get := func(path string) (*http.Response, []byte) {
		resp, err := hs.Client().Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data
	}
	resp, data := get("/health")
	e := wantError(t, resp.StatusCode, resp.Header, data, 503, "")
	if !strings.Contains(e.Error.Message, "Loading model") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("loading health: %v %s", resp.Header, data)
	}
	raw, _ := json.Marshal(chatBody("hi", nil))
	presp, err := hs.Client().Post(hs.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	pdata, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	wantError(t, presp.StatusCode, presp.Header, pdata, 503, "")
	if presp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After while loading")
	}
	// Invalid requests are still 400 while loading (validation comes first).
	bresp, err := hs.Client().Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"tiny"}`))
	if err != nil {
		t.Fatal(err)
	}
	bresp.Body.Close()
	if bresp.StatusCode != 400 {
		t.Fatalf("invalid request while loading: %d", bresp.StatusCode)
	}
	if err := s.Load(func() (*exec.Model, error) { return tiny.model, nil }); err != nil {
		t.Fatal(err)
	}
	defer func() { s.sched.close(); <-s.sched.idle() }()
	if resp, data := get("/health"); resp.StatusCode != 200 {
		t.Fatalf("ready health: %d %s", resp.StatusCode, data)
	}
}

// F6: a broken model directory fails the load with a message naming the problem, and
// /health reports it instead of serving.
func TestBrokenModelFailsLoad(t *testing.T) {
	copyDir := func(t *testing.T) string {
		dst := t.TempDir()
		entries, err := os.ReadDir(tiny.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(tiny.dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dst
	}
	cases := []struct {
		name     string
		breakDir func(t *testing.T, dir string)
		want     string
	}{
		{"missing dir", func(t *testing.T, dir string) { os.RemoveAll(dir) }, "no such file"},
		{"no config", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "config.json")) }, "config.json"},
		{"no tokenizer", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "tokenizer.json")) }, "tokenizer"},
		{"truncated weights", func(t *testing.T, dir string) {
			files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if len(files) == 0 {
				t.Fatal("no safetensors in the tiny model")
			}
			st, _ := os.Stat(files[0])
			os.Truncate(files[0], st.Size()/2)
		}, "safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t)
			c.breakDir(t, dir)
			cfg := testConfig()
			cfg.ModelDir = dir
			s := New(cfg)
			err := s.Load(func() (*exec.Model, error) {
				m, err := exec.Open(dir, exec.Options{Backend: "cpu"})
				if err != nil {
					return nil, err
				}
				return m, nil
			})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load error %v, want one naming %q", err, c.want)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/health", nil)
			req.Host = "localhost"
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != 503 || !strings.Contains(rec.Body.String(), "model_load_failed") {
				t.Fatalf("health after a failed load: %d %s", rec.Code, rec.Body.String())
			}
		})
	}
}

// F9: shutdown refuses new work with 503, answers queued streams in-band, lets the
// running request go on until the grace period ends, then cancels it with an in-band
// error and [DONE].
func TestShutdown(t *testing.T) {
	model, err := exec.Open(tiny.dir, exec.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(testConfig())
	if err := s.Load(func() (*exec.Model, error) { return model, nil }); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ts := &testServer{Server: s, URL: hs.URL, client: hs.Client()}

	bodies := make([]string, 3)
	var wg sync.WaitGroup
	start := func(i int, maxTokens int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, data := ts.post(t, "/v1/chat/completions", chatBody("story", map[string]any{"max_tokens": maxTokens, "stream": true, "ignore_eos": true}))
			if status != 200 {
				t.Errorf("stream %d: %d %s", i, status, data)
			}
			bodies[i] = string(data)
		}()
	}
	start(0, 1000) // runs past the grace period
	waitRunning(t, ts)
	start(1, 2)
	start(2, 2)
	for d, _ := s.sched.depth(); d < 2; d, _ = s.sched.depth() {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	shutdownErr := make(chan error, 1)
	go func() { shutdownErr <- s.Shutdown(ctx) }()
	for !s.shutdown.Load() {
		time.Sleep(time.Millisecond)
	}
	status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("late", nil))
	e := wantError(t, status, hdr, data, 503, "")
	if e.Error.Code == nil || *e.Error.Code != "shutting_down" {
		t.Fatalf("new request during shutdown: %s", data)
	}
	if err := <-shutdownErr; err != nil {
		t.Fatal(err)
	}
	// Shutdown released everything: the cached snapshots, the session, the model.
	if st := s.runner.cache.stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Errorf("cache after shutdown: %+v", st)
	}
	if err := s.runner.sess.Prefill(context.Background(), []int32{1}, exec.PrefillOptions{}); err == nil {
		t.Error("the session still runs after shutdown")
	}
	if _, err := model.NewSession(8); err == nil {
		t.Error("the model still makes sessions after shutdown")
	}
	wg.Wait()
	for i, b := range bodies {
		if !strings.HasSuffix(b, "data: [DONE]\n\n") || !strings.Contains(b, "shutting_down") {
			t.Fatalf("stream %d did not end with an in-band shutdown error and [DONE]: %q", i, b[max(0, len(b)-300):])
		}
	}
}
