package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Tests for bugs found in an adversarial review of the server. Each one failed before
// its fix.

// top_p 0 asks for the smallest nucleus there is: the single most probable token. The
// engine's sampler reads 0 as "no nucleus filter", so the server must translate it, or
// top_p 0 samples from the whole distribution, the opposite of what the client asked.
func TestReviewTopPZeroIsGreedy(t *testing.T) {
	ts := startServer(t, nil)
	greedy := ts.chat(t, chatBody("the top token only", map[string]any{"max_tokens": 12}))
	for _, seed := range []int{1, 2, 3} {
		got := ts.chat(t, chatBody("the top token only", map[string]any{"max_tokens": 12, "temperature": 1, "top_p": 0, "seed": seed}))
		if got.reasoning() != greedy.reasoning() || got.content() != greedy.content() {
			t.Fatalf("seed %d: top_p 0 gave %q/%q, greedy gave %q/%q", seed,
				got.reasoning(), got.content(), greedy.reasoning(), greedy.content())
		}
	}
}

// The prefix cache is shared by both endpoints, and a snapshot is exact only where the
// new prompt is cut at the same points as the run that took it. Chat prompts were cut at
// message headers but completion prompts only at multiples of snapshotEvery, so the same
// tokens sent to /v1/completions restored a snapshot computed with other cuts, and the
// cached run generated other tokens than a cold one.
func TestReviewPrefixCacheExactAcrossEndpoints(t *testing.T) {
	msgs := []map[string]any{
		{"role": "system", "content": "You are a terse assistant who answers in one line."},
		{"role": "user", "content": "What is the capital of France, and why?"},
		{"role": "assistant", "content": "Paris."},
		{"role": "user", "content": "And of Italy? Explain the history in some detail please."},
	}
	chatReq := map[string]any{"model": testModel, "messages": msgs, "max_tokens": 1, "temperature": 0}
	warm := startServer(t, nil)
	cold := startServer(t, func(c *Config) { c.CacheBytes = -1 })
	warm.chat(t, chatReq)
	prompt := warm.lastTrace(t).Prompt
	splits := warm.messageSplits(prompt)
	if len(splits) < 3 {
		t.Fatalf("prompt of %d tokens has header splits %v; the test needs several", len(prompt), splits)
	}
	// Up to the last user message's header: a prefix the chat run cut differently from
	// the grid alone.
	for _, n := range []int{splits[len(splits)-2], len(prompt)} {
		comp := map[string]any{"model": testModel, "prompt": prompt[:n], "max_tokens": 200, "temperature": 0, "ignore_eos": true}
		if status, _, data := warm.post(t, "/v1/completions", comp); status != 200 {
			t.Fatalf("status %d: %s", status, data)
		}
		if status, _, data := cold.post(t, "/v1/completions", comp); status != 200 {
			t.Fatalf("status %d: %s", status, data)
		}
		w, c := warm.lastTrace(t), cold.lastTrace(t)
		if w.Result.CachedTokens == 0 {
			t.Fatalf("prompt[:%d]: the completion reused nothing of the chat's cache", n)
		}
		if !slices.Equal(w.Result.Tokens, c.Result.Tokens) {
			t.Fatalf("prompt[:%d]: completion restoring %d cached tokens generated %v, a cold server %v",
				n, w.Result.CachedTokens, w.Result.Tokens, c.Result.Tokens)
		}
	}
}

// A non-streamed request whose client leaves gets no response at all, and the server
// logs it as 499; /metrics counted it as a 200, a success that was never sent.
func TestReviewAbandonedRequestIsNotCountedAsOK(t *testing.T) {
	ts := startServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, _ := json.Marshal(chatBody("a long answer nobody waits for", map[string]any{"max_tokens": 1500, "ignore_eos": true}))
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := ts.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitRunning(t, ts)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request finished before the client left; make it longer")
	}
	count := func(status int) int64 {
		if v, ok := ts.metrics.requests.Load(requestKey{"chat.completions", status}); ok {
			return v.(*atomic.Int64).Load()
		}
		return 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(499)+count(200) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ok, gone := count(200), count(499); ok != 0 || gone != 1 {
		t.Fatalf("/metrics counts the abandoned request as %d x 200 and %d x 499, want 0 and 1", ok, gone)
	}
}

// A stream whose first write fails (its client is already gone) returned at once and left
// its job in the queue, holding a slot until the engine got to it: meanwhile a live
// client was refused with 503 server_busy. A write deadline that has always passed makes
// every stream's first write fail.
func TestReviewFailedStreamStartFreesItsQueueSlot(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Queue = 1; c.WriteTimeout = time.Nanosecond })
	// A plain request occupies the engine (plain responses are written without a deadline).
	long := make(chan int, 1)
	go func() {
		raw, _ := json.Marshal(chatBody("keep the engine busy", map[string]any{"max_tokens": 400, "ignore_eos": true}))
		resp, err := ts.client.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
		if err != nil {
			long <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		long <- resp.StatusCode
	}()
	waitRunning(t, ts)

	raw, _ := json.Marshal(chatBody("a stream that cannot be written", map[string]any{"stream": true}))
	if resp, err := ts.client.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw)); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if waiting, _ := ts.sched.depth(); waiting != 0 {
		t.Fatalf("%d jobs still wait after their stream failed", waiting)
	}
	if status, _, data := ts.post(t, "/v1/chat/completions", chatBody("a live client", nil)); status != 200 {
		t.Fatalf("a live client got %d: %s", status, data)
	}
	if status := <-long; status != 200 {
		t.Fatalf("the long request got %d", status)
	}
}

// The legacy endpoint takes a prompt as a string, one string in an array, or token ids;
// a batch of one token-id prompt ([[ids]], what tokenizing clients send) was refused
// although a batch of one string was not, and an empty array was called "a batch of 0
// prompts".
func TestReviewCompletionPromptForms(t *testing.T) {
	ts := startServer(t, nil)
	ids := []int{72, 101, 108, 108, 111}
	want := completionText(t, ts, map[string]any{"model": testModel, "prompt": ids, "max_tokens": 4, "temperature": 0})
	if got := completionText(t, ts, map[string]any{"model": testModel, "prompt": [][]int{ids}, "max_tokens": 4, "temperature": 0}); got != want {
		t.Fatalf("[[ids]] gave %q, [ids] gave %q", got, want)
	}
	for _, empty := range []any{[]int{}, [][]int{{}}, []string{""}} {
		status, hdr, data := ts.post(t, "/v1/completions", map[string]any{"model": testModel, "prompt": empty})
		e := wantError(t, status, hdr, data, 400, "prompt")
		if !strings.Contains(e.Error.Message, "empty") {
			t.Fatalf("prompt %v: %q does not say the prompt is empty", empty, e.Error.Message)
		}
	}
	status, hdr, data := ts.post(t, "/v1/completions", map[string]any{"model": testModel, "prompt": [][]int{ids, ids}})
	wantError(t, status, hdr, data, 400, "prompt")
}

// A model ships its recommended sampling in generation_config.json (Qwen: top_k 20,
// top_p 0.95). The server ignored it, so a client that sends only a temperature, or
// nothing, sampled from the whole vocabulary. Here the file says top_k 1: requests that
// leave top_k out must come out greedy, and one that sets top_k itself must not.
func TestReviewSamplingDefaultsFromGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(tiny.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gen := `{"eos_token_id": 0, "temperature": 0.9, "top_k": 1, "top_p": 0.95}`
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *Config) { c.ModelDir = dir })
	greedy := ts.chat(t, chatBody("sample me", map[string]any{"max_tokens": 12}))
	for _, seed := range []int{1, 2} {
		body := chatBody("sample me", map[string]any{"max_tokens": 12, "seed": seed})
		delete(body, "temperature")
		if got := ts.chat(t, body); got.reasoning() != greedy.reasoning() || got.content() != greedy.content() {
			t.Fatalf("seed %d without sampling fields: %q, want the model's top_k 1 (greedy) %q", seed, got.reasoning(), greedy.reasoning())
		}
		body["temperature"] = 1.5
		if got := ts.chat(t, body); got.reasoning() != greedy.reasoning() {
			t.Fatalf("seed %d with only a temperature: %q, want the model's top_k 1 (greedy) %q", seed, got.reasoning(), greedy.reasoning())
		}
	}
	body := chatBody("sample me", map[string]any{"max_tokens": 12, "seed": 1, "temperature": 1, "top_k": 0})
	if got := ts.chat(t, body); got.reasoning() == greedy.reasoning() {
		t.Fatal("a request's own top_k 0 was overridden by the model's default")
	}

	bad := filepath.Join(t.TempDir(), "generation_config.json")
	os.WriteFile(bad, []byte(`{"temperature": 7}`), 0o644)
	if _, err := loadSamplingDefaults(filepath.Dir(bad)); err == nil || !strings.Contains(err.Error(), "temperature") {
		t.Fatalf("temperature 7 in generation_config.json: error %v", err)
	}
}

// A client that sends its headers and part of a body, then nothing, held its connection
// and handler forever: the http.Server has no ReadTimeout (it would also cut long
// streams), and the body was read with no deadline. Now the body read has the same
// per-operation deadline as writes, and the stalled request gets a 400.
func TestReviewStalledBodyTimesOut(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body within 3 s: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("stalled body: status %d, want 400", resp.StatusCode)
	}
}
