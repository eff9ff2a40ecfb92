package gpu

import (
	"strings"
	"testing"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The lowering runs attention_prefill only where the plan marks the attention and the
// kernel applies (more than one token; query heads per kv head dividing its 8 SIMD
// groups), on one group per (kv head, query tile), the key split on z; everything else
// keeps the kernel it had.
func TestPrefillAttentionLowering(t *testing.T) {
	out := []Operand{{Addr: 4 << 40, DType: graph.F32}}
	marked := graph.Attrs{"scale": 0.0625, AttrPrefillTiled: int64(1)}
	plain := graph.Attrs{"scale": 0.0625}
	split := func(s int, tiled bool) graph.Attrs {
		a := graph.Attrs{"scale": 0.0625, "splits": int64(s), "key_block": int64(kernels.AttnKeyBlock)}
		if tiled {
			a[AttrPrefillTiled] = int64(1)
		}
		return a
	}
	for _, tc := range []struct {
		name       string
		op         string
		attrs      graph.Attrs
		T, NH, KVH int
		kernel     string
		grid       [3]int
	}{
		{"model chunk", "attention", marked, 512, 16, 2, kernels.KernelAttentionPrefill, [3]int{2, 128, 1}},
		{"model chunk unmarked", "attention", plain, 512, 16, 2, kernels.KernelAttentionGQA, [3]int{2, 512, 1}},
		{"tile cut short", "attention", marked, 70, 4, 2, kernels.KernelAttentionPrefill, [3]int{2, 5, 1}},
		{"one head per kv head", "attention", marked, 70, 2, 2, kernels.KernelAttentionPrefill, [3]int{2, 3, 1}},
		{"decode ignores the mark", "attention", marked, 1, 16, 2, kernels.KernelAttentionGQA, [3]int{2, 1, 1}},
		{"3 heads per kv head", "attention", marked, 64, 6, 2, kernels.KernelAttentionGQA, [3]int{2, 64, 1}},
		{"16 heads per kv head", "attention", marked, 64, 16, 1, kernels.KernelAttention, [3]int{16, 64, 1}},
		{"split", "attention_partial", split(5, true), 128, 16, 2, kernels.KernelAttentionPrefill, [3]int{2, 32, 5}},
		{"split unmarked", "attention_partial", split(5, false), 128, 16, 2, kernels.KernelAttentionGQA, [3]int{2, 128, 5}},
		{"split decode", "attention_partial", split(33, true), 1, 16, 2, kernels.KernelAttentionGQA, [3]int{2, 1, 33}},
	} {
		l, err := CUDA.Lower(&plan.Dispatch{Op: tc.op, Attrs: tc.attrs}, attentionOperands(tc.T, tc.NH, tc.KVH, 256, graph.BF16), out, 5<<40)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Kernel != tc.kernel || l.Grid != tc.grid || l.Block != 256 {
			t.Errorf("%s: %s on %v x%d, want %s on %v x256", tc.name, l.Kernel, l.Grid, l.Block, tc.kernel, tc.grid)
		}
	}
}

// The key split of attention_prefill counts its (kv head, query tile) groups: the
// model's 512-token chunk (256 groups) takes 2 ranges on the H200's 264, a 128-token
// step 5, a 4096-token chunk none; where the kernel does not apply there is no split.
func TestPrefillAttentionSplits(t *testing.T) {
	for _, tc := range []struct{ T, NH, KVH, D, want int }{
		{512, 16, 2, 256, 2}, {128, 16, 2, 256, 5}, {4096, 16, 2, 256, 1}, {8, 16, 2, 256, 64},
		{1, 16, 2, 256, 1}, {64, 6, 2, 256, 1}, {64, 16, 2, 320, 1},
	} {
		if got := CUDA.PrefillAttentionSplits(tc.T, tc.NH, tc.KVH, tc.D); got != tc.want {
			t.Errorf("T %d, %d/%d heads, D %d: %d splits, want %d", tc.T, tc.NH, tc.KVH, tc.D, got, tc.want)
		}
	}
}

// Marked for the tensor cores (the mma-attention pass), a tiled prefill attention over a
// float32 or bf16 cache runs attention_prefill_mma on attention_prefill's grid in groups
// of AttnMMAHalves·D threads, whole or split; the mark on a target without tensor cores,
// on a head dim that does not divide 256, or where no tiled kernel runs (decode,
// unmarked for tiling) is an error that names it, not a silent fallback.
func TestPrefillAttentionMMALowering(t *testing.T) {
	out := []Operand{{Addr: 4 << 40, DType: graph.F32}}
	mma := graph.Attrs{"scale": 0.0625, AttrPrefillTiled: int64(1), AttrMMAAttention: true}
	split := graph.Attrs{"scale": 0.0625, "splits": int64(5), "key_block": int64(kernels.AttnKeyBlock), AttrPrefillTiled: int64(1), AttrMMAAttention: true}
	for _, tc := range []struct {
		name       string
		op         string
		attrs      graph.Attrs
		T, NH, KVH int
		D          int
		cache      graph.DType
		grid       [3]int
	}{
		{"model chunk", "attention", mma, 1024, 16, 2, 256, graph.F32, [3]int{2, 256, 1}},
		{"model chunk, bf16 cache", "attention", mma, 1024, 16, 2, 256, graph.BF16, [3]int{2, 256, 1}},
		{"one head per kv head", "attention", mma, 70, 2, 2, 64, graph.F32, [3]int{2, 3, 1}},
		{"split", "attention_partial", split, 128, 16, 2, 128, graph.F32, [3]int{2, 32, 5}},
	} {
		// The kernel's group of rows is attention_prefill's tile of tokens.
		if kernels.AttnMMAHalves*16 != kernels.AttnPrefillRows*kernels.AttnSIMDs {
			t.Fatalf("attention_prefill_mma takes %d rows a group, attention_prefill's grid %d", kernels.AttnMMAHalves*16, kernels.AttnPrefillRows*kernels.AttnSIMDs)
		}
		in := attentionOperands(tc.T, tc.NH, tc.KVH, tc.D, tc.cache)
		if !CUDA.MMAAttentionShape(tc.op, in) {
			t.Errorf("%s: MMAAttentionShape refuses it", tc.name)
		}
		l, err := CUDA.Lower(&plan.Dispatch{Op: tc.op, Attrs: tc.attrs}, in, out, 5<<40)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if block := kernels.AttnMMAHalves * tc.D; l.Kernel != kernels.KernelAttentionPrefillMMA || l.Grid != tc.grid || l.Block != block {
			t.Errorf("%s: %s on %v x%d, want %s on %v x%d", tc.name, l.Kernel, l.Grid, l.Block, kernels.KernelAttentionPrefillMMA, tc.grid, block)
		}
	}
	for _, tc := range []struct {
		name   string
		target *Target
		attrs  graph.Attrs
		T      int
		cache  graph.DType
		D      int
	}{
		{"no tensor cores", Metal, mma, 512, graph.F32, 256},
		{"decode", CUDA, mma, 1, graph.F32, 256},
		{"not tiled", CUDA, graph.Attrs{"scale": 0.0625, AttrMMAAttention: true}, 512, graph.F32, 256},
		{"head dim 96", CUDA, mma, 512, graph.F32, 96},
	} {
		in := attentionOperands(tc.T, 16, 2, tc.D, tc.cache)
		if tc.target.MMAAttentionShape("attention", in) && tc.attrs.Int(AttrPrefillTiled) != 0 {
			t.Errorf("%s: MMAAttentionShape takes it", tc.name)
		}
		if _, err := tc.target.Lower(&plan.Dispatch{Op: "attention", Attrs: tc.attrs}, in, out, 5<<40); err == nil || !strings.Contains(err.Error(), AttrMMAAttention) {
			t.Errorf("%s: lowered with the mark (err %v), want an error naming %s", tc.name, err, AttrMMAAttention)
		}
	}
}

// Marked for the tensor cores (the mma-decode-attention pass), attention that is not tiled
// for prefill runs attention_gqa_mma on attention_gqa's grid (kv heads x tokens x key
// ranges) in groups of D threads (a warp per 32 head dims), whole or split, over a float32 or a bf16 cache;
// the mark on a target without tensor cores, with more query heads per kv head than the
// mma's 8 columns, or with a head dim that is not a multiple of 32 is an error that names
// it, not a silent fallback.
func TestDecodeAttentionMMALowering(t *testing.T) {
	out := []Operand{{Addr: 4 << 40, DType: graph.F32}}
	mark := graph.Attrs{"scale": 0.0625, AttrMMADecodeAttention: true}
	split := graph.Attrs{"scale": 0.0625, "splits": int64(64), "key_block": int64(kernels.AttnKeyBlock), AttrMMADecodeAttention: true}
	for _, tc := range []struct {
		name       string
		op         string
		attrs      graph.Attrs
		T, NH, KVH int
		cache      graph.DType
		grid       [3]int
	}{
		{"decode, split", "attention_partial", split, 1, 16, 2, graph.F32, [3]int{2, 1, 64}},
		{"decode, bf16 cache", "attention_partial", split, 1, 16, 2, graph.BF16, [3]int{2, 1, 64}},
		{"three tokens, whole", "attention", mark, 3, 4, 2, graph.F32, [3]int{2, 3, 1}},
	} {
		in := attentionOperands(tc.T, tc.NH, tc.KVH, 256, tc.cache)
		if !CUDA.MMADecodeAttentionShape(tc.op, in) {
			t.Errorf("%s: MMADecodeAttentionShape refuses it", tc.name)
		}
		l, err := CUDA.Lower(&plan.Dispatch{Op: tc.op, Attrs: tc.attrs}, in, out, 5<<40)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Kernel != kernels.KernelAttentionGQAMMA || l.Grid != tc.grid || l.Block != 256 {
			t.Errorf("%s: %s on %v x%d, want %s on %v x256", tc.name, l.Kernel, l.Grid, l.Block, kernels.KernelAttentionGQAMMA, tc.grid)
		}
	}
	for _, tc := range []struct {
		name    string
		target  *Target
		NH, KVH int
		D       int
	}{
		{"no tensor cores", Metal, 16, 2, 256},
		{"16 query heads per kv head", CUDA, 16, 1, 256},
		{"head dim 48", CUDA, 16, 2, 48}, // refused by every attention kernel, before the mark
	} {
		in := attentionOperands(1, tc.NH, tc.KVH, tc.D, graph.F32)
		if tc.target.MMADecodeAttentionShape("attention", in) {
			t.Errorf("%s: MMADecodeAttentionShape takes it", tc.name)
		}
		_, err := tc.target.Lower(&plan.Dispatch{Op: "attention", Attrs: mark}, in, out, 5<<40)
		if err == nil || (!strings.Contains(err.Error(), AttrMMADecodeAttention) && tc.D%32 == 0) {
			t.Errorf("%s: lowered with the mark (err %v), want an error naming %s", tc.name, err, AttrMMADecodeAttention)
		}
	}
}

// attentionOperands are attention's q [T, NH, D] and K and V caches of 4,096 rows [4096,
// KVH, D] at made-up device addresses.
func attentionOperands(T, NH, KVH, D int, cache graph.DType) []Operand {
	return []Operand{
		{Addr: 1 << 40, DType: graph.F32, Shape: []int{T, NH, D}},
		{Addr: 2 << 40, DType: cache, Shape: []int{4096, KVH, D}},
		{Addr: 3 << 40, DType: cache, Shape: []int{4096, KVH, D}},
	}
}
