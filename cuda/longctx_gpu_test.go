//go:build linux

package cuda

import (
	"fmt"
	"testing"

	"pistil/exec"
	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/passes"
	"pistil/verify"
)

// The long-context options keep the answer on both golden layouts, held to their
// tolerances as `pistil check` holds them: decode's fixed-block key split switched on
// inside the fixture's context (from 48 keys, blocks of 16: the decode steps after 40
// prefilled tokens cross it and reach 8 blocks), with a float32 and a bf16 KV cache, and
// the bf16 KV cache in prefill chunks of 7, and decode attention staged through group
// memory (staged-decode-attention, which keeps equal key ranges) from 40 prefilled
// tokens, and the bf16 cache's prefill attention on attention_prefill_mma (fa2-attention
// off; on, the default, the bf16 lines run attention_prefill_fa2), whole and in chunks of
// 7. Skips without a GPU (or cuda/emu).
func TestLongContextOptionsKeepTheAnswer(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	blocks := passes.Config{KeyBlockSplitFrom: 48, KeyBlockKeys: 16}
	cases := []struct {
		name       string
		kv         graph.DType
		cfg        passes.Config
		chunk      int
		decodeFrom int
		tolerance  string
	}{
		{"blocks/f32/decode-from-40", graph.F32, blocks, 0, 40, "exact"},
		{"blocks/bf16/decode-from-40", graph.BF16, blocks, 0, 40, "bf16-kv"},
		{"bf16/chunk-7", graph.BF16, passes.Config{}, 7, 0, "bf16-kv"},
		{"staged/f32/decode-from-40", graph.F32, passes.Config{Off: map[string]bool{"staged-decode-attention": false}}, 0, 40, "exact"},
		{"mma/bf16/whole", graph.BF16, passes.Config{Off: map[string]bool{"fa2-attention": true}}, 0, 0, "bf16-kv"},
		{"mma/bf16/chunk-7", graph.BF16, passes.Config{Off: map[string]bool{"fa2-attention": true}}, 7, 0, "bf16-kv"},
	}
	for _, layout := range []string{"mlx-q4", "hf"} {
		ref, err := verify.LoadReference(fixtures.Golden(layout) + "/reference.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s", layout, c.name), func(t *testing.T) {
				m, err := exec.Open(fixtures.Golden(layout), exec.Options{Backend: "cuda", Graphs: true, AllLogits: true,
					KVCache: c.kv, Passes: c.cfg, Chunk: c.chunk})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				rep, err := verify.Run(t.Context(), m, ref, verify.Options{DecodeFrom: c.decodeFrom})
				if err != nil {
					t.Fatal(err)
				}
				tol, err := verify.LookupTolerance(c.tolerance)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("max abs error %.3g, top-1 %.4f, perplexity ratio %.5f", rep.MaxAbsErr, rep.Top1Agree, rep.PPLRatio())
				if fails := tol.Failures(rep); len(fails) > 0 {
					t.Errorf("%s: %v", tol.Name, fails)
				}
			})
		}
	}
}
