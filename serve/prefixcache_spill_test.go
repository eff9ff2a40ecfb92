package serve

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	_ "pistil/cuda" // the CUDA backend, on a GPU or cuda/emu; the test skips without either
	"pistil/exec"
)

// On a GPU backend the prefix cache keeps at most its device budget in device memory and
// spills the rest to host memory. With a device budget of two snapshots, two conversations
// interleaved turn by turn spill each other's snapshots and KV blocks, so every later turn
// restores from host memory (an upload; the session holds the other conversation's rows):
// it still restores all of its previous prompt, generates exactly what a cold server does
// (tokens and logprobs), and the device part never passes its budget. Runs on the CUDA
// backend: a GPU, or cuda/emu on the CPU:
//
//	PISTIL_LIBCUDA=$PWD/.dev/emu/libcuda.so.1 PISTIL_LIBNVRTC=$PWD/.dev/emu/libnvrtc.so.12 \
//	  go test ./serve -run PrefixCacheSpills -v -timeout 30m
func TestPrefixCacheSpillsToHost(t *testing.T) {
	open := func() *exec.Model {
		m, err := exec.Open(tiny.dir, exec.Options{Backend: "cuda", Graphs: true})
		if err != nil {
			t.Skipf("no CUDA device or cuda/emu: %v", err)
		}
		return m
	}
	start := func(cacheBytes, hostBytes int64) *testServer {
		ts, _ := startOwningServer(t, open(), func(cfg *Config) {
			cfg.Context, cfg.CacheBytes, cfg.CacheHostBytes = 512, cacheBytes, hostBytes
		})
		return ts
	}
	snapshot := tiny.model.FixedStateBytes() // the same model on the CPU: the same state sizes
	ts := start(2*snapshot, 256<<20)
	if st := ts.runner.cache.stats(); st.DeviceBudget != 2*snapshot || st.Budget != 2*snapshot+256<<20 {
		t.Fatalf("budgets %+v: want %d in device memory, %d in all", st, 2*snapshot, 2*snapshot+256<<20)
	}
	cold := start(-1, 0)

	type conversation struct {
		msgs       []any
		prevPrompt []int32
	}
	convs := []*conversation{{}, {}}
	for i, c := range convs {
		c.msgs = []any{
			map[string]any{"role": "system", "content": fmt.Sprintf("You are agent %d.", i)},
			map[string]any{"role": "user", "content": agentText(fmt.Sprintf("agent %d", i), 120)},
		}
	}
	fromHost := 0
	for n := 1; n <= 3; n++ {
		for ci, c := range convs {
			want := 0
			if n > 1 {
				splits := ts.messageSplits(c.prevPrompt)
				want = splits[len(splits)-1]
				if ent := ts.cachedEntry(c.prevPrompt[:want]); ent == nil {
					t.Fatalf("conversation %d turn %d: no cached snapshot of the previous prompt's %d tokens", ci, n, want)
				} else if !ent.snap.OnDevice() {
					fromHost++
				}
			}
			body := map[string]any{"model": testModel, "messages": slices.Clone(c.msgs), "max_tokens": 3, "temperature": 0,
				"logprobs": true, "top_logprobs": 3}
			r, raw := ts.chatRaw(t, body)
			tr := ts.lastTrace(t)
			if got := r.Usage.PromptTokensDetails.CachedTokens; got != want {
				t.Fatalf("conversation %d turn %d: cached %d of %d prompt tokens, want %d", ci, n, got, len(tr.Prompt), want)
			}
			st := ts.runner.cache.stats()
			t.Logf("conversation %d turn %d: prompt %d, cached %d; cache %+v", ci, n, len(tr.Prompt), want, st)
			if st.DeviceBytes > st.DeviceBudget || st.Bytes > st.Budget {
				t.Fatalf("conversation %d turn %d: %d bytes in device memory (budget %d), %d in all (budget %d)",
					ci, n, st.DeviceBytes, st.DeviceBudget, st.Bytes, st.Budget)
			}
			_, coldRaw := cold.chatRaw(t, body)
			if got := cold.lastTrace(t).Result.Tokens; !slices.Equal(got, tr.Result.Tokens) {
				t.Fatalf("conversation %d turn %d: the cached server generated %v, a cold one %v", ci, n, tr.Result.Tokens, got)
			}
			if a, b := logprobsOf(t, raw), logprobsOf(t, coldRaw); a != b {
				t.Fatalf("conversation %d turn %d: logprobs differ from a cold server's:\ncached %s\ncold   %s", ci, n, a, b)
			}
			c.prevPrompt = slices.Clone(tr.Prompt)
			c.msgs = append(c.msgs, map[string]any{"role": "assistant", "content": r.content()},
				map[string]any{"role": "user", "content": agentText(fmt.Sprintf("turn %d of agent %d", n, ci), 60)})
		}
	}
	st := ts.runner.cache.stats()
	if st.Spills == 0 || fromHost != 4 {
		t.Fatalf("%d spills, %d of 4 later turns restored from host memory: %+v", st.Spills, fromHost, st)
	}
	_, _, metrics := ts.do(t, "GET", "/metrics", nil, nil)
	for _, line := range []string{
		fmt.Sprintf("pistil_prefix_cache_device_budget_bytes %s", formatFloat(float64(st.DeviceBudget))),
		fmt.Sprintf("pistil_prefix_cache_spills_total %d", st.Spills),
	} {
		if !strings.Contains(string(metrics), line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// cachedEntry is the cache's entry for exactly tokens, or nil.
func (ts *testServer) cachedEntry(tokens []int32) *cacheEntry {
	c := ts.runner.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		if ent := e.Value.(*cacheEntry); slices.Equal(ent.tokens, tokens) {
			return ent
		}
	}
	return nil
}
