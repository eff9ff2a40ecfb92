package serve

import (
	"slices"
	"testing"

	"pistil/exec"
)

// C15: a conversation's later turns restore the cached prefix they share with earlier
// turns, prefill only the new tokens, and produce exactly what a cold server produces.
func TestC15MultiTurnPrefixCache(t *testing.T) {
	for _, preserve := range []bool{false, true} {
		ts := startServer(t, nil)
		kwargs := map[string]any{"preserve_thinking": preserve}
		msgs := []any{
			map[string]any{"role": "system", "content": "You are a careful assistant."},
			map[string]any{"role": "user", "content": "What is the capital of France?"},
		}
		var prevFed []int32 // the previous turn's prompt plus the tokens fed back (cached or not)
		for turn := 1; turn <= 3; turn++ {
			body := map[string]any{"model": testModel, "messages": msgs, "max_tokens": 6, "temperature": 0, "chat_template_kwargs": kwargs}
			prefillBefore := ts.metrics.prefillTokens.Load()
			r := ts.chat(t, body)
			tr := ts.lastTrace(t)
			prefilled := ts.metrics.prefillTokens.Load() - prefillBefore
			cached := r.Usage.PromptTokensDetails.CachedTokens

			if got := int64(r.Usage.PromptTokens - cached); prefilled != got {
				t.Fatalf("preserve=%v turn %d: engine prefilled %d tokens, prompt %d - cached %d = %d",
					preserve, turn, prefilled, r.Usage.PromptTokens, cached, got)
			}
			if turn == 1 && cached != 0 {
				t.Fatalf("turn 1 reports %d cached tokens on a cold server", cached)
			}
			if turn > 1 {
				shared := commonPrefix(prevFed, tr.Prompt)
				if !preserve && cached != shared {
					// The template drops the previous reasoning, so the turns diverge right
					// after the previous generation prompt's header, a cut point.
					t.Fatalf("turn %d: cached %d, shared prefix %d", turn, cached, shared)
				}
				// In general: the last cut point of this prompt within the shared prefix.
				want := 0
				for _, p := range append(ts.messageSplits(tr.Prompt), (shared/64)*64) {
					if p <= shared && p > want {
						want = p
					}
				}
				if cached != want {
					t.Fatalf("preserve=%v turn %d: cached %d, want the last cut point %d within the shared prefix %d", preserve, turn, cached, want, shared)
				}
				if cached == 0 {
					t.Fatalf("turn %d reused nothing", turn)
				}
				// The same request on a cold server gives the same tokens.
				cold := startServer(t, nil)
				cr := cold.chat(t, body)
				ctr := cold.lastTrace(t)
				if cr.Usage.PromptTokensDetails.CachedTokens != 0 {
					t.Fatal("cold server reports cached tokens")
				}
				if !slices.Equal(ctr.Result.Tokens, tr.Result.Tokens) {
					t.Fatalf("preserve=%v turn %d (cached %d, splits %v): cached run %v != cold run %v", preserve, turn, cached, ts.messageSplits(tr.Prompt), tr.Result.Tokens, ctr.Result.Tokens)
				}
			}
			fed := len(tr.Result.Tokens) - 1 // the last sampled token is never fed back
			prevFed = append(append([]int32(nil), tr.Prompt...), tr.Result.Tokens[:max(fed, 0)]...)
			assistant := map[string]any{"role": "assistant", "content": r.content()}
			if rc := r.reasoning(); rc != "" {
				assistant["reasoning_content"] = rc
			}
			msgs = append(msgs, assistant, map[string]any{"role": "user", "content": "And of Spain, turn " + string(rune('0'+turn)) + "?"})
		}
	}
}

// The cache stays within its byte budget and evicts least recently used entries.
func TestPrefixCacheBudget(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.CacheBytes = 1 }) // too small for any snapshot
	ts.chat(t, chatBody("one", nil))
	ts.chat(t, chatBody("one", nil))
	if st := ts.runner.cache.stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("cache over budget: %+v", st)
	}

	sess := ts.runner.sess
	sess.Reset()
	prompt := ts.tok.Encode("a prompt long enough for two snapshots")
	var snaps []*exec.Snapshot
	every8 := exec.PrefillOptions{SnapshotEvery: 8, OnSnapshot: func(s *exec.Snapshot) { snaps = append(snaps, s) }}
	if err := sess.Prefill(t.Context(), prompt, every8); err != nil {
		t.Fatal(err)
	}
	if len(snaps) < 3 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	// Each snapshot owns a partial KV block [0, Len) here (all are shorter than a block).
	cost := func(s *exec.Snapshot) int64 { return entryBytes(prompt[:s.Len], s) + s.KV()[0].Bytes() }
	budget := cost(snaps[0]) + cost(snaps[1])
	c := newPrefixCache(budget)
	for i, s := range snaps[:3] {
		c.add(prompt[:s.Len], s, false, uint64(i+1), nil) // three requests
	}
	st := c.stats()
	if st.Bytes > budget || st.Entries >= 3 || st.Evictions == 0 {
		t.Fatalf("over budget: %+v (budget %d)", st, budget)
	}
	// The oldest entry (the shortest prefix) was evicted; the longest is found.
	if e := c.lookup(prompt, anyLength); e == nil || len(e.tokens) != snaps[2].Len {
		t.Fatalf("lookup found %v", e)
	}
	if e := c.lookup(prompt[:snaps[0].Len], anyLength); e != nil {
		t.Fatalf("evicted entry still found (len %d)", len(e.tokens))
	}
	// Restoring a cached snapshot reproduces the state: the logits match a fresh prefill
	// cut into the same pieces (other piece sizes round differently).
	ent := c.lookup(prompt, anyLength)
	sess.Reset() // the state's rows are zero: the restore copies every block in
	if err := sess.Restore(ent.snap); err != nil {
		t.Fatal(err)
	}
	restored := append([]float32(nil), sess.Logits()...)
	sess.Reset()
	if err := sess.Prefill(t.Context(), prompt[:ent.snap.Len], exec.PrefillOptions{SnapshotEvery: 8, OnSnapshot: func(*exec.Snapshot) {}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range sess.Logits() {
		if v != restored[i] {
			t.Fatalf("restored logits differ at %d: %v vs %v", i, restored[i], v)
		}
	}
}

func anyLength(int) bool { return true }
