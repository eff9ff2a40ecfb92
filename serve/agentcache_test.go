package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pistil/exec"
	"pistil/models/synth"
)

// Agents send the same long conversation again and again with a few hundred new tokens
// each turn. Two such conversations, interleaved, on the default budget: a long first
// turn, then 10 short turns each; every later turn restores all of the shared prefix
// (cached_tokens == the prefix it shares with the previous turn of its conversation),
// the cache stays within its budget, and the last turns generate exactly what a cold
// server generates.
//
// In `go test ./...` it runs synth's tiny preset with a 1,200-token first turn. The
// issue's configuration ("state": the full model's 40 layers, attention and Gated
// DeltaNet widths, so the full model's KV and recurrent state sizes, with a toy hidden
// size, experts and vocabulary; a 12K-token first turn) prefills about 5 tokens/s on this 2-core
// machine, an hour for this test, so it runs only with
//
//	PISTIL_AGENT_PRESET=state PISTIL_AGENT_TOKENS=12000 go test ./serve -run AgentContext -timeout 3h
func TestAgentContextPrefixCache(t *testing.T) {
	if testing.Short() {
		t.Skip("long conversations; skipped in -short")
	}
	preset, first := "tiny", 1200
	if p := os.Getenv("PISTIL_AGENT_PRESET"); p != "" {
		preset = p
	}
	if n, err := strconv.Atoi(os.Getenv("PISTIL_AGENT_TOKENS")); err == nil && n > 0 {
		first = n
	}
	turns := 11 // the long first turn and 10 short ones
	if n, err := strconv.Atoi(os.Getenv("PISTIL_AGENT_TURNS")); err == nil && n > 1 {
		turns = n // fewer for a quicker look at a large configuration
	}
	opts := synth.Options{Preset: preset, Layout: synth.MLXQ4, Seed: 11, Out: t.TempDir(), Workers: 2}
	if preset == "state" {
		// The full model's layers, attention and Gated DeltaNet heads and widths (so its
		// KV and recurrent state sizes), with a toy hidden size, experts and vocabulary.
		d, err := synth.PresetDims("full")
		if err != nil {
			t.Fatal(err)
		}
		d.Vocab, d.Hidden, d.Experts, d.TopK, d.ExpertWidth, d.SharedWidth = 512, 128, 4, 2, 64, 64
		opts.Dims = &d
	}
	dir := opts.Out
	if _, err := synth.Write(opts); err != nil {
		t.Fatal(err)
	}
	start := func(cacheBytes int64) (*testServer, *exec.Model) {
		model, err := exec.Open(dir, exec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.ModelDir, cfg.Context, cfg.CacheBytes, cfg.SnapshotEvery = dir, first+4096, cacheBytes, 512
		s := New(cfg)
		ts := &testServer{Server: s}
		s.onFinish = func(g genTrace) { ts.mu.Lock(); ts.traces = append(ts.traces, g); ts.mu.Unlock() }
		if err := s.Load(func() (*exec.Model, error) { return model, nil }); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		ts.URL, ts.client = hs.URL, hs.Client()
		t.Cleanup(func() { hs.Close(); s.sched.close(); <-s.sched.idle(); s.runner.sess.Close(); model.Close() })
		return ts, model
	}
	ts, _ := start(0) // the default budget
	budget := ts.runner.cache.stats().Budget
	t.Logf("preset %s, first turn %d tokens, default budget %d bytes", preset, first, budget)

	text := agentText
	type conversation struct {
		msgs    []any
		prevFed []int32
		last    map[string]any
	}
	convs := []*conversation{{}, {}}
	for i, c := range convs {
		c.msgs = []any{
			map[string]any{"role": "system", "content": fmt.Sprintf("You are agent %d.", i)},
			map[string]any{"role": "user", "content": text(fmt.Sprintf("agent %d", i), first)},
		}
	}
	for turn := 1; turn <= turns; turn++ {
		for ci, c := range convs {
			body := map[string]any{"model": testModel, "messages": c.msgs, "max_tokens": 8, "temperature": 0}
			r := ts.chat(t, body)
			tr := ts.lastTrace(t)
			cached := r.Usage.PromptTokensDetails.CachedTokens
			if turn > 1 {
				// The template drops nothing here (no reasoning), so the turn shares the
				// previous prompt and every token fed back but the last generated one; the
				// last cut point within that is the previous generation prompt's header.
				want := 0
				shared := commonPrefix(c.prevFed, tr.Prompt)
				for _, p := range append(ts.messageSplits(tr.Prompt), (shared/512)*512) {
					if p <= shared && p > want {
						want = p
					}
				}
				if cached != want || cached < len(tr.Prompt)-400 {
					t.Fatalf("conversation %d turn %d: cached %d of %d prompt tokens, want %d (shared prefix %d)", ci, turn, cached, len(tr.Prompt), want, shared)
				}
			}
			if st := ts.runner.cache.stats(); st.Bytes > st.Budget {
				t.Fatalf("conversation %d turn %d: cache holds %d bytes, budget %d", ci, turn, st.Bytes, st.Budget)
			}
			fed := max(len(tr.Result.Tokens)-1, 0)
			c.prevFed = append(slices.Clone(tr.Prompt), tr.Result.Tokens[:fed]...)
			c.last = body
			c.last["_tokens"] = tr.Result.Tokens
			c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": r.content()},
				map[string]any{"role": "user", "content": text(fmt.Sprintf("turn %d of agent %d", turn, ci), 300)})
		}
	}
	st := ts.runner.cache.stats()
	t.Logf("cache after %d turns of 2 conversations: %+v", turns, st)
	if st.Hits < int64(2*(turns-1)) {
		t.Fatalf("%d hits over %d later turns", st.Hits, 2*(turns-1))
	}

	// The last turn of each conversation on a cold server: the same tokens.
	cold, _ := start(-1)
	for ci, c := range convs {
		want := c.last["_tokens"].([]int32)
		delete(c.last, "_tokens")
		cold.chat(t, c.last)
		if got := cold.lastTrace(t).Result.Tokens; !slices.Equal(got, want) {
			t.Fatalf("conversation %d: the cached server generated %v, a cold one %v", ci, want, got)
		}
	}
}

// agentText is text of about n tokens (synth's tokenizer is byte-level), different per
// seed.
func agentText(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d: the tool returned %d rows. ", seed, i, (i*7919)%1000)
	}
	return b.String()[:n]
}

// The GPU check, against servers already running (it skips without
// PISTIL_AGENT_URL): a 12K-token first turn, then 10 turns of ~300 new tokens; every later
// turn must be cached to within its new tokens and prefill in under 0.5 s (timings
// prompt_ms: the restore plus the new tokens), and with PISTIL_AGENT_COLD_URL (a server
// started with --cache-bytes -1) every turn's answer must equal the cold server's. For
// the full synthetic model on an H200:
//
//	pistil serve --backend cuda --model FULL --port 8080 &
//	pistil serve --backend cuda --model FULL --port 8081 --cache-bytes -1 &
//	PISTIL_AGENT_URL=http://127.0.0.1:8080 PISTIL_AGENT_COLD_URL=http://127.0.0.1:8081 \
//	  go test ./serve -run AgainstRunningServers -v -timeout 1h
func TestAgentTurnsAgainstRunningServers(t *testing.T) {
	url, coldURL := os.Getenv("PISTIL_AGENT_URL"), os.Getenv("PISTIL_AGENT_COLD_URL")
	if url == "" {
		t.Skip("set PISTIL_AGENT_URL to a running pistil serve (and PISTIL_AGENT_COLD_URL to one with --cache-bytes -1)")
	}
	first := 12000
	if n, err := strconv.Atoi(os.Getenv("PISTIL_AGENT_TOKENS")); err == nil && n > 0 {
		first = n
	}
	client := &http.Client{Timeout: 30 * time.Minute}
	post := func(base string, body any) chatResp {
		raw, _ := json.Marshal(body)
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", base, resp.StatusCode, data)
		}
		var r chatResp
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
		return r
	}
	resp, err := client.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) == 0 {
		t.Fatalf("GET /v1/models: %v %+v", err, models)
	}
	msgs := []any{
		map[string]any{"role": "system", "content": "You are a coding agent."},
		map[string]any{"role": "user", "content": agentText("task", first)},
	}
	prevPrompt := 0
	for turn := 1; turn <= 11; turn++ {
		body := map[string]any{"model": models.Data[0].ID, "messages": msgs, "max_tokens": 32, "temperature": 0}
		start := time.Now()
		r := post(url, body)
		wall := time.Since(start)
		cached, prompt := r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens
		var promptMS float64
		if r.Timings != nil {
			promptMS = r.Timings.PromptMS
		}
		t.Logf("turn %d: prompt %d tokens, cached %d, prefill %.0f ms, request %v", turn, prompt, cached, promptMS, wall.Round(time.Millisecond))
		if turn > 1 {
			// The previous prompt up to its generation header is a prefix of this one.
			if cached < prevPrompt-16 || cached >= prompt {
				t.Errorf("turn %d: cached %d of %d prompt tokens; the previous prompt had %d", turn, cached, prompt, prevPrompt)
			}
			if r.Timings == nil || promptMS >= 500 {
				t.Errorf("turn %d: prefill took %.0f ms (timings %v), want under 500", turn, promptMS, r.Timings != nil)
			}
		}
		if coldURL != "" {
			if c := post(coldURL, body); c.content() != r.content() || c.reasoning() != r.reasoning() {
				t.Errorf("turn %d: the cached server answered %q / %q, the cold one %q / %q", turn, r.reasoning(), r.content(), c.reasoning(), c.content())
			}
		}
		prevPrompt = prompt
		msgs = append(msgs, map[string]any{"role": "assistant", "content": r.content()},
			map[string]any{"role": "user", "content": agentText(fmt.Sprintf("turn %d", turn), 300)})
	}
}
