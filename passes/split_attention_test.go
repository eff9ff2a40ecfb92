package passes_test

import (
	"fmt"
	"testing"

	"pistil/gpu"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/plan"
)

// On the 35B-A3B's shapes, split-attention gives GPU decode the fixed-block split from
// Config.KeyBlockSplitFrom keys on (default 32768): attention_partial on a grid of
// kernels.AttnMaxRanges ranges, blocks of gpu.BlockSplitKeys, the equal split's count
// below the switch, and attention_merge the same rule; a negative KeyBlockSplitFrom gives
// the equal split alone (the plan before the switch existed); prefill never gets it.
// On CUDA that is with staged-decode-attention off (the default): on, decode attention
// runs on attention_gqa_staged, which keeps the equal split at every context (below).
func TestSplitAttentionKeyBlocks(t *testing.T) {
	g := fullModelGraph(t)
	for _, target := range []string{"cuda", "metal"} {
		tg, _ := passes.TargetFor(target)
		short := tg.GPU.AttentionSplits(1, 16, 2, 256)
		for _, c := range []struct {
			from, want, keys, wantKeys int
		}{{0, passes.DefaultKeyBlockSplitFrom, 0, gpu.BlockSplitKeys}, {4096, 4096, 64, 64}, {1, 1, 0, gpu.BlockSplitKeys}, {-1, 0, 0, 0}} {
			cfg := passes.Config{KeyBlockSplitFrom: c.from, KeyBlockKeys: c.keys, Off: map[string]bool{"staged-decode-attention": true}}
			decode, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1, Backend: target}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			parts, merges := splitAttention(t, fmt.Sprintf("%s from %d", target, c.from), decode)
			for _, d := range parts {
				splits, grid := short, [3]int{2, 1, short}
				if c.want > 0 {
					splits, grid = kernels.AttnMaxRanges, [3]int{2, 1, kernels.AttnMaxRanges}
				}
				r := ops.KeyRangesOf(d.Attrs)
				if r.Splits != splits || r.BlockFrom != c.want || d.Grid != grid ||
					r.BlockKeys != c.wantKeys || c.want > 0 && r.ShortSplits != short {
					t.Errorf("%s from %d: attention_partial %+v on grid %v, want %d ranges from %d keys on grid %v", target, c.from, r, d.Grid, splits, c.want, grid)
				}
			}
			for _, d := range merges {
				if got := d.Attrs.Int("block_from"); got != c.want {
					t.Errorf("%s from %d: attention_merge block_from %d, want %d", target, c.from, got, c.want)
				}
			}
		}
		prefill, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: 64, LastLogitsOnly: true, Backend: target}, passes.Config{KeyBlockSplitFrom: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range prefill.Dispatches {
			if d.Attrs.Int("block_from") != 0 {
				t.Errorf("%s prefill: %s %s has the fixed-block rule", target, d.Op, d.Label)
			}
		}
	}
}

// With staged-decode-attention on, CUDA decode attention is
// attention_gqa_staged on the equal split (64 ranges a kv head on the 35B-A3B's shapes)
// whatever KeyBlockSplitFrom says, and attention_merge merges those: its groups stream a
// range of any length, so the fixed-block split's grid of kernels.AttnMaxRanges ranges
// would only add groups that return at once.
func TestStagedDecodeAttentionKeepsEqualRanges(t *testing.T) {
	g := fullModelGraph(t)
	short := gpu.CUDA.AttentionSplits(1, 16, 2, 256)
	for _, from := range []int{0, 1, 4096, -1} {
		decode, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1, Backend: "cuda"},
			passes.Config{KeyBlockSplitFrom: from, Off: map[string]bool{"staged-decode-attention": false}})
		if err != nil {
			t.Fatal(err)
		}
		parts, merges := splitAttention(t, fmt.Sprintf("from %d", from), decode)
		for _, d := range parts {
			r := ops.KeyRangesOf(d.Attrs)
			if d.Kernel != kernels.KernelAttentionGQAStaged || r.Splits != short || r.BlockFrom != 0 || d.Grid != [3]int{2, 1, short} || d.Block != 256 {
				t.Errorf("from %d: attention_partial %s %+v on grid %v x %d, want attention_gqa_staged, %d equal ranges on grid [2 1 %d] x 256", from, d.Kernel, r, d.Grid, d.Block, short, short)
			}
		}
		for _, d := range merges {
			if got := d.Attrs.Int("block_from"); got != 0 {
				t.Errorf("from %d: attention_merge block_from %d, want 0", from, got)
			}
		}
	}
}

// splitAttention is a decode plan's attention_partial and attention_merge dispatches,
// failing the test (what names the case) unless each of the model's ten attention layers
// has one of each.
func splitAttention(t *testing.T, what string, p *plan.Plan) (parts, merges []plan.Dispatch) {
	t.Helper()
	for _, d := range p.Dispatches {
		switch d.Op {
		case "attention_partial":
			parts = append(parts, d)
		case "attention_merge":
			merges = append(merges, d)
		}
	}
	if len(parts) != 10 || len(merges) != 10 {
		t.Errorf("%s: %d attention_partial and %d attention_merge, want 10 each", what, len(parts), len(merges))
	}
	return parts, merges
}
