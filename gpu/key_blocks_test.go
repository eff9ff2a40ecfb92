package gpu

import (
	"strings"
	"testing"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The fixed-block key split lowers to attention_gqa on a grid of its ranges with the rule
// in the args of both kernels; equal ranges stay capped at kernels.AttnMaxSplits; a bad
// rule, more ranges than the merge holds, and the rule on attention_prefill are errors.
func TestKeyBlockSplitLowering(t *testing.T) {
	in := []Operand{
		{Addr: 1 << 40, DType: graph.F32, Shape: []int{1, 16, 256}},
		{Addr: 2 << 40, DType: graph.F32, Shape: []int{4096, 2, 256}},
		{Addr: 3 << 40, DType: graph.F32, Shape: []int{4096, 2, 256}},
	}
	out := []Operand{{Addr: 4 << 40, DType: graph.F32}}
	blocks := func(splits, from, keys, short int) graph.Attrs {
		return graph.Attrs{"scale": 0.0625, "splits": int64(splits), "key_block": int64(kernels.AttnKeyBlock),
			"block_from": int64(from), "block_keys": int64(keys), "short_splits": int64(short)}
	}
	l, err := CUDA.Lower(&plan.Dispatch{Op: "attention_partial", Attrs: blocks(kernels.AttnMaxRanges, 32768, 256, 64)}, in, out, 5<<40)
	if err != nil {
		t.Fatal(err)
	}
	a := l.Args.(*kernels.AttentionArgs)
	if l.Kernel != kernels.KernelAttentionGQA || l.Grid != [3]int{2, 1, kernels.AttnMaxRanges} || a.Splits != int32(kernels.AttnMaxRanges) ||
		a.BlockFrom != 32768 || a.BlockKeys != 256 || a.ShortSplits != 64 || a.Steps != 5<<40 {
		t.Errorf("attention_partial: %s on %v, args %+v", l.Kernel, l.Grid, *a)
	}
	merged := []Operand{{Addr: 6 << 40, DType: graph.F32, Shape: []int{1, 16, kernels.AttnMaxRanges, 258}}}
	l, err = CUDA.Lower(&plan.Dispatch{Op: "attention_merge", Attrs: blocks(0, 32768, 256, 64)}, merged, []Operand{{Addr: 7 << 40, DType: graph.F32, Shape: []int{1, 16, 256}}}, 5<<40)
	if err != nil {
		t.Fatal(err)
	}
	if m := l.Args.(*kernels.AttentionMergeArgs); m.Splits != int32(kernels.AttnMaxRanges) || m.NH != 16 || m.BlockFrom != 32768 || m.BlockKeys != 256 || m.ShortSplits != 64 || m.Steps != 5<<40 {
		t.Errorf("attention_merge args %+v", *m)
	}
	tiled := blocks(8, 1, 64, 4)
	tiled[AttrPrefillTiled] = int64(1)
	prefill := append([]Operand{{Addr: 1 << 40, DType: graph.F32, Shape: []int{64, 16, 256}}}, in[1:]...)
	for _, c := range []struct {
		name  string
		in    []Operand
		attrs graph.Attrs
		want  string
	}{
		{"equal ranges past 64", in, graph.Attrs{"scale": 0.0625, "splits": int64(65), "key_block": int64(kernels.AttnKeyBlock)}, "2..64 ranges"},
		{"blocks past the merge's ranges", in, blocks(kernels.AttnMaxRanges+1, 32768, 256, 64), "2..512 ranges"},
		{"blocks of 24 keys", in, blocks(512, 32768, 24, 64), "block_keys 24"},
		{"no short split", in, blocks(512, 32768, 256, 0), "short_splits 0"},
		{"blocks on attention_prefill", prefill, tiled, "attention_prefill cuts equal ranges"},
	} {
		if _, err := CUDA.Lower(&plan.Dispatch{Op: "attention_partial", Attrs: c.attrs}, c.in, out, 5<<40); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
