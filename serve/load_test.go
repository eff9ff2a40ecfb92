package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// streamUntil posts a streaming chat request, reads events until n content or reasoning
// deltas arrived, then drops the connection. It returns the status.
func streamUntil(t testing.TB, ts *testServer, body map[string]any, n int) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := json.Marshal(withField(body, "stream", true))
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Errorf("post: %v", err)
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	sc := bufio.NewScanner(resp.Body)
	seen := 0
	for seen < n && sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role"`) || strings.Contains(line, `"reasoning_content":"`) {
			seen++
		}
	}
	cancel() // the client goes away mid-stream
	return resp.StatusCode
}

// waitIdle waits until the engine runs nothing and nothing waits.
func waitIdle(t testing.TB, ts *testServer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n, running := ts.sched.depth(); n == 0 && !running {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the engine did not become idle")
}

// L4 and the load test: 32 concurrent clients send 200 requests, some streamed,
// some dropped mid-stream. Every request completes correctly or gets a 503; afterwards
// goroutines and heap are back to their baseline, and no dropped request ran more than
// one decode step after its client left.
func TestLoad(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Queue = 16; c.CacheBytes = 32 << 20 })
	system := map[string]any{"role": "system", "content": "You answer in one word."}
	body := func(i int) map[string]any {
		return map[string]any{"model": testModel, "temperature": 0, "max_tokens": 3,
			"chat_template_kwargs": map[string]any{"enable_thinking": i%3 != 0},
			"messages":             []any{system, map[string]any{"role": "user", "content": fmt.Sprintf("q%d", i%7)}}}
	}
	// Warm up (plans compiled, cache entries for the shared prefix), then measure.
	for i := range 7 {
		ts.chat(t, body(i))
	}
	waitIdle(t, ts)
	ts.client.CloseIdleConnections()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()
	cacheBefore := ts.runner.cache.stats().Bytes
	tracesBefore := ts.traceCount()

	const clients, total = 32, 200
	var next, ok, busy, dropped atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				b := body(i)
				switch {
				case i%5 == 0: // drops the connection after the first generated text
					status := streamUntil(t, ts, withField(withField(b, "max_tokens", 64), "ignore_eos", true), 1)
					if status != 200 && status != 503 {
						t.Errorf("request %d: status %d", i, status)
					}
					if status == 503 {
						busy.Add(1)
						time.Sleep(150 * time.Millisecond) // a client backs off after a 503
					} else {
						dropped.Add(1)
					}
				default:
					if i%2 == 0 {
						b = withField(b, "stream", true)
					}
					status, hdr, data := ts.post(t, "/v1/chat/completions", b)
					switch status {
					case 503:
						if hdr.Get("Retry-After") == "" || hdr.Get("x-should-retry") != "true" {
							t.Errorf("503 without Retry-After: %v", hdr)
						}
						var e apiErr
						if json.Unmarshal(data, &e) != nil || e.Error.Code == nil || *e.Error.Code != "server_busy" {
							t.Errorf("503 body %s", data)
						}
						busy.Add(1)
						time.Sleep(150 * time.Millisecond)
					case 200:
						if err := checkComplete(t, b["stream"] == true, data); err != nil {
							t.Errorf("request %d: %v", i, err)
						}
						ok.Add(1)
					default:
						t.Errorf("request %d: status %d: %s", i, status, data)
					}
				}
			}
		}()
	}
	wg.Wait()
	waitIdle(t, ts)
	t.Logf("%d completed, %d busy (503), %d dropped mid-stream, %d generations", ok.Load(), busy.Load(), dropped.Load(), ts.traceCount()-tracesBefore)
	if ok.Load()+busy.Load()+dropped.Load() != total {
		t.Fatalf("requests lost: %d + %d + %d != %d", ok.Load(), busy.Load(), dropped.Load(), total)
	}
	if ok.Load() == 0 {
		t.Fatal("nothing completed")
	}
	if n := ts.metrics.stepsAfterCancelMax.Load(); n > 1 {
		t.Fatalf("a dropped request ran %d decode steps after its client left", n)
	}
	cancelledRunning := 0
	ts.mu.Lock()
	for _, g := range ts.traces[tracesBefore:] {
		if g.Result.StepsAfterCancel >= 0 {
			cancelledRunning++
			if g.Result.StepsAfterCancel > 1 {
				t.Errorf("generation ran %d steps after cancel", g.Result.StepsAfterCancel)
			}
			if !errors.Is(g.Err, context.Canceled) && g.Err != nil {
				t.Errorf("cancelled generation ended with %v", g.Err)
			}
		}
	}
	ts.mu.Unlock()
	if dropped.Load() > 0 && cancelledRunning == 0 {
		t.Fatal("no dropped request was cancelled while running: the disconnect path was not exercised")
	}

	// Goroutines: back to the baseline once idle connections are closed.
	ts.client.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutinesBefore+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutinesBefore+2 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines grew from %d to %d:\n%s", goroutinesBefore, g, buf[:n])
	}
	// Heap: growth is only what the bounded prefix cache took on.
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	cacheGrowth := ts.runner.cache.stats().Bytes - cacheBefore
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc) - cacheGrowth
	t.Logf("heap %d -> %d bytes (cache grew %d)", before.HeapAlloc, after.HeapAlloc, cacheGrowth)
	if growth > 16<<20 {
		t.Fatalf("heap grew %d bytes beyond the prefix cache's growth", growth)
	}
}

// checkComplete checks that a 200 response is a whole, well-formed answer.
func checkComplete(t testing.TB, stream bool, data []byte) error {
	if stream {
		s := string(data)
		if !strings.HasSuffix(s, "data: [DONE]\n\n") || strings.Count(s, `"finish_reason":"`) != 1 || strings.Contains(s, `"error"`) {
			return fmt.Errorf("incomplete stream: %q", s)
		}
		return nil
	}
	var r chatResp
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	if len(r.Choices) != 1 || (r.Choices[0].FinishReason != "length" && r.Choices[0].FinishReason != "stop") ||
		r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens || r.Usage.CompletionTokens == 0 {
		return fmt.Errorf("incomplete response: %s", data)
	}
	return nil
}

// L1: concurrent streams queue behind one lane, each gets exactly its solo output, and the
// waiting ones get keep-alive pings; /metrics shows the queue draining.
func TestConcurrentStreamsNoCrosstalk(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.PingInterval = 20 * time.Millisecond })
	const n = 6
	body := func(i int) map[string]any {
		return chatBody(fmt.Sprintf("Prompt number %d, distinct.", i), map[string]any{"max_tokens": 8})
	}
	solo := make([]string, n)
	for i := range n {
		r := ts.chat(t, body(i))
		solo[i] = r.reasoning() + "|" + r.content()
	}
	// Prompts are cached now; clear the cache so every stream prefills (slower, so the
	// queue really forms).
	ts.runner.cache = newPrefixCache(0)
	results := make([]streamResult, n)
	var wg sync.WaitGroup
	var maxDeferred atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if d, _ := ts.sched.depth(); int64(d) > maxDeferred.Load() {
				maxDeferred.Store(int64(d))
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = ts.streamChat(t, body(i))
		}()
	}
	wg.Wait()
	close(stop)
	pinged := 0
	for i, r := range results {
		if got := r.reasoning + "|" + r.content; got != solo[i] {
			t.Fatalf("stream %d: %q, solo run %q", i, got, solo[i])
		}
		if r.pings > 0 {
			pinged++
		}
	}
	if maxDeferred.Load() == 0 {
		t.Fatal("no request ever waited: the test did not exercise the queue")
	}
	if pinged == 0 {
		t.Fatal("no queued stream received a keep-alive ping")
	}
	waitIdle(t, ts)
	_, _, metrics := ts.do(t, "GET", "/metrics", nil, nil)
	for _, want := range []string{"pistil_requests_deferred 0", "pistil_requests_processing 0", `pistil_requests_total{endpoint="chat.completions",status="200"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// L2: with the lane busy and the queue full, exactly the overflow gets 503.
func TestQueueOverflow(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Queue = 2 })
	blocker := make(chan struct{})
	go func() {
		defer close(blocker)
		ts.post(t, "/v1/chat/completions", chatBody("long one", map[string]any{"max_tokens": 400, "ignore_eos": true}))
	}()
	waitRunning(t, ts)
	var wg sync.WaitGroup
	var ok, busy atomic.Int64
	for i := range 7 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody(fmt.Sprintf("q%d", i), map[string]any{"max_tokens": 2}))
			switch status {
			case 200:
				ok.Add(1)
			case 503:
				e := wantError(t, status, hdr, data, 503, "")
				if hdr.Get("Retry-After") == "" || hdr.Get("x-should-retry") != "true" || e.Error.Code == nil || *e.Error.Code != "server_busy" {
					t.Errorf("503 shape: %v %s", hdr, data)
				}
				busy.Add(1)
			default:
				t.Errorf("status %d: %s", status, data)
			}
		}()
	}
	wg.Wait()
	<-blocker
	if ok.Load() != 2 || busy.Load() != 5 {
		t.Fatalf("%d served, %d refused; want 2 and 5", ok.Load(), busy.Load())
	}
}

func waitRunning(t testing.TB, ts *testServer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, running := ts.sched.depth(); running {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("nothing started running")
}

// L3: many clients time out; the next request is served at once, not after their work.
func TestTimedOutClientsFreeTheEngine(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Queue = 32 })
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, _ := json.Marshal(chatBody(fmt.Sprintf("slow %d", i), map[string]any{"max_tokens": 500, "ignore_eos": true}))
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(raw))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := ts.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				t.Errorf("request %d finished despite the client timeout: %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	ts.chat(t, chatBody("normal", map[string]any{"max_tokens": 4}))
	// 20 orphaned generations of 500 tokens would take many seconds.
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the next request took %v: orphaned work kept the engine", d)
	}
	if n := ts.metrics.stepsAfterCancelMax.Load(); n > 1 {
		t.Fatalf("%d decode steps after a cancel", n)
	}
}
