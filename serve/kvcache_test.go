package serve

import (
	"slices"
	"testing"

	"pistil/exec"
	"pistil/graph"
)

// A model with a bf16 KV cache serves through the prefix cache as the float32 one does:
// its KV rows are half the bytes (and so the default cache budget's KV part), its KV
// blocks hold that many bytes per row, and a later turn that restores a cached prefix
// gives exactly the tokens a cold server on the same bf16 model gives.
func TestPrefixCacheBF16KV(t *testing.T) {
	model, err := exec.Open(tiny.dir, exec.Options{Backend: "cpu", KVCache: graph.BF16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { model.Close() })
	kv, kv32 := model.KVBytesPerToken(), tiny.model.KVBytesPerToken()
	if kv <= 0 || 2*kv != kv32 {
		t.Fatalf("bf16 KV bytes per token %d, float32 %d: want half", kv, kv32)
	}
	if model.FixedStateBytes() != tiny.model.FixedStateBytes() {
		t.Errorf("fixed state %d bytes with a bf16 KV cache, %d without: only the KV cache changes", model.FixedStateBytes(), tiny.model.FixedStateBytes())
	}
	const capacity = 2048
	budget, _ := defaultCacheBudget(model, capacity)
	budget32, _ := defaultCacheBudget(tiny.model, capacity)
	if _, limited := model.FreeMemory(); !limited && budget32-budget != 2*(kv32-kv)*capacity {
		t.Errorf("default cache budget %d with bf16 KV, %d with float32: want the KV rows' difference %d", budget, budget32, 2*(kv32-kv)*capacity)
	}

	ts := startServerWith(t, model, nil)
	msgs := []any{map[string]any{"role": "user", "content": "What is the capital of France?"}}
	first := ts.chat(t, map[string]any{"model": testModel, "messages": msgs, "max_tokens": 6, "temperature": 0})
	msgs = append(msgs, map[string]any{"role": "assistant", "content": first.content()},
		map[string]any{"role": "user", "content": "And of Spain?"})
	body := map[string]any{"model": testModel, "messages": msgs, "max_tokens": 6, "temperature": 0}
	second := ts.chat(t, body)
	warm := ts.lastTrace(t)
	if second.Usage.PromptTokensDetails.CachedTokens == 0 {
		t.Fatal("the second turn restored nothing from the prefix cache")
	}
	ts.runner.cache.mu.Lock()
	for e := ts.runner.cache.lru.Front(); e != nil; e = e.Next() {
		for _, b := range e.Value.(*cacheEntry).snap.KV() {
			if got, want := b.Bytes(), int64(b.End-b.Start)*kv; got != want {
				t.Errorf("KV block [%d, %d) holds %d bytes, want %d (bf16 rows)", b.Start, b.End, got, want)
			}
		}
	}
	ts.runner.cache.mu.Unlock()

	cold := startServerWith(t, model, func(c *Config) { c.CacheBytes = -1 })
	cold.chat(t, body)
	if got, want := warm.Result.Tokens, cold.lastTrace(t).Result.Tokens; !slices.Equal(got, want) {
		t.Fatalf("bf16 KV: the turn restored from the cache gave %v, a cold server %v", got, want)
	}
}
