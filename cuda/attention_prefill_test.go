//go:build linux

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
)

// prefillCase is attention over T tokens of G query heads per kv head after C cached
// tokens, as the plan's tile-attention asks for it (gpu.AttrPrefillTiled), run against
// the CPU's attention reference; splits > 0 is the split form (attention_partial over
// that many key ranges, then attention_merge).
func prefillCase(r *rand.Rand, D, G, kvh, C, T int, dt graph.DType, splits int) opCase {
	rows := C + T + 5
	cache := func() *ops.Tensor {
		if dt == graph.BF16 {
			return randtensor.BF16(r, rows, kvh, D)
		}
		return randtensor.F32(r, rows, kvh, D)
	}
	name := fmt.Sprintf("D%d/G%d/kvh%d/%s/C%d/T%d", D, G, kvh, dt, C, T)
	if splits > 0 {
		name += fmt.Sprintf("/split%d", splits)
	}
	return opCase{name: name, op: "attention",
		attrs:  graph.Attrs{"scale": 1 / math.Sqrt(float64(D)), gpu.AttrPrefillTiled: int64(1)},
		in:     []*ops.Tensor{randtensor.F32(r, T, G*kvh, D), cache(), cache()},
		C:      C,
		splits: splits}
}

// partialCase is an attention case as attention_partial over splits key ranges (the
// split form's first dispatch, checked range by range), with the case's kernel marks.
func partialCase(c opCase, splits int) opCase {
	attrs := graph.Attrs{"scale": c.attrs.Float("scale"), "splits": int64(splits), "key_block": int64(kernels.AttnKeyBlock)}
	for _, mark := range []string{gpu.AttrPrefillTiled, gpu.AttrMMAAttention, gpu.AttrFA2Attention} {
		if v, ok := c.attrs[mark]; ok {
			attrs[mark] = v
		}
	}
	c.name = fmt.Sprintf("%s/partial%d", c.name, splits)
	c.op, c.attrs = "attention_partial", attrs
	return c
}

// attention_prefill against the reference over the shapes that matter: head dims 64,
// 128 and 256 (the model's), 1, 2, 4 and 8 query heads per kv head (the model has 8),
// contexts 0, 40 and past several key tiles, step lengths that are not multiples of the
// query tile (which is 4 tokens at G = 8, 32 at G = 1), and both cache dtypes. Each case
// also runs split over key ranges, as a plan with few query tiles has it. T = 1 checks
// that decode ignores the mark (attention_gqa runs).
func TestPrefillAttentionVariants(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(11, 12))
	steps := []int{1, 3, 37, 70}
	contexts := []int{0, 40, 301}
	n := 0
	for _, D := range []int{64, 128, 256} {
		for _, G := range []int{1, 2, 4, 8} {
			for ci, C := range contexts {
				// Every (C, T) pair at D 64; a rotation of them at the larger head dims,
				// which cost the emulator most, so each still meets every C and T.
				for ti, T := range steps {
					if D > 64 && (ci+ti+G)%len(contexts) != 0 && T != 1 {
						continue
					}
					dt := graph.F32
					if n%2 == 1 {
						dt = graph.BF16
					}
					kvh := 1 + n/2%2
					n++
					c := prefillCase(r, D, G, kvh, C, T, dt, 0)
					t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
					if s := gpu.CUDA.PrefillAttentionSplits(T, G*kvh, kvh, D); T > 1 {
						c.splits = max(s, 3)
						c.name += fmt.Sprintf("/split%d", c.splits)
						t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
					}
				}
			}
		}
	}
}

// The model's shape on a longer step: 16 query heads over 2 kv heads of dim 256, a
// 130-token step (33 query tiles, the last of 2 tokens) after 75 cached tokens, with
// the split the compiler would choose for it, and without.
func TestPrefillAttentionModelShape(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		c := prefillCase(r, 256, 8, 2, 75, 130, dt, 0)
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
		c.splits = gpu.CUDA.PrefillAttentionSplits(130, 16, 2, 256)
		c.name += fmt.Sprintf("/split%d", c.splits)
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// With the mark, attention_partial runs attention_prefill over key ranges; its partial
// states are the op's own (each token's keys cut as attention_gqa cuts them), so they
// match attention_partial's reference range by range, empty ranges included.
func TestPrefillAttentionPartialStates(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(15, 16))
	for _, tc := range []struct{ D, G, kvh, C, T, splits int }{
		{64, 8, 1, 40, 9, 4}, {128, 2, 2, 301, 21, 7}, {256, 8, 2, 20, 6, 5}, {64, 1, 2, 0, 45, 3},
		// Ranges of differing widths inside one query tile (16 keys up to 48 seen, 32
		// beyond), the last one empty for the later tokens.
		{64, 1, 1, 45, 40, 3}, {256, 8, 2, 45, 9, 3},
	} {
		c := partialCase(prefillCase(r, tc.D, tc.G, tc.kvh, tc.C, tc.T, graph.BF16, 0), tc.splits)
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// attention_prefill_mma (the mma-attention pass's mark) against the reference over the
// shapes of TestPrefillAttentionVariants, float32 and bf16 caches alternating:
// head dims 32, 64, 128 and 256 (one to eight warps a half, 8 to 1 keys an owner thread), 1 to 8 query heads per kv head, one and two kv heads, steps
// that end inside a query tile and a warp's rows, contexts inside and past a key tile,
// whole and split over key ranges; then the model's shape, and partial states range by
// range with empty ranges.
func TestPrefillAttentionMMA(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(17, 18))
	mma := func(c opCase) opCase {
		c.attrs = c.attrs.Clone()
		c.attrs[gpu.AttrMMAAttention] = true
		c.name = "mma/" + c.name
		return c
	}
	n := 0
	for _, D := range []int{32, 64, 128, 256} {
		for _, G := range []int{1, 2, 4, 8} {
			for ci, C := range []int{0, 13, 301} {
				for ti, T := range []int{2, 5, 37, 70} {
					if D > 64 && (ci+ti+G)%3 != 0 {
						continue
					}
					kvh := 1 + n%2
					dt := graph.F32
					if n/2%2 == 1 {
						dt = graph.BF16
					}
					n++
					c := mma(prefillCase(r, D, G, kvh, C, T, dt, 0))
					t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
					c.splits = max(gpu.CUDA.PrefillAttentionSplits(T, G*kvh, kvh, D), 3)
					c.name += fmt.Sprintf("/split%d", c.splits)
					t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
				}
			}
		}
	}
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		c := mma(prefillCase(r, 256, 8, 2, 75, 130, dt, 0))
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
	for i, tc := range []struct{ D, G, kvh, C, T, splits int }{
		{64, 8, 1, 40, 9, 4}, {128, 2, 2, 301, 21, 7}, {64, 1, 1, 45, 40, 3}, {256, 8, 2, 45, 9, 3},
	} {
		dt := graph.F32
		if i%2 == 1 {
			dt = graph.BF16
		}
		c := partialCase(mma(prefillCase(r, tc.D, tc.G, tc.kvh, tc.C, tc.T, dt, 0)), tc.splits)
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// attention_prefill_fa2 (the fa2-attention pass's mark) against the reference over a
// bf16 cache: head dims 64, 128 and 256, 1 to 8 query heads per kv head (a group's 128
// rows are 128 to 16 tokens), one and two kv heads, steps that end inside a group's
// tokens and inside a warp's 16 rows, contexts inside one 64-key tile and past several,
// whole and split over key ranges; then the model's shape over more than one group of
// tokens, and partial states range by range with empty ranges.
func TestPrefillAttentionFA2(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(19, 20))
	fa2 := func(c opCase) opCase {
		c.attrs = c.attrs.Clone()
		c.attrs[gpu.AttrMMAAttention] = true
		c.attrs[gpu.AttrFA2Attention] = true
		c.name = "fa2/" + c.name
		return c
	}
	n := 0
	for _, D := range []int{64, 128, 256} {
		for _, G := range []int{1, 2, 4, 8} {
			for ci, C := range []int{0, 13, 301} {
				for ti, T := range []int{2, 5, 37, 140} {
					if D > 64 && (ci+ti+G)%3 != 0 {
						continue
					}
					kvh := 1 + n%2
					n++
					c := fa2(prefillCase(r, D, G, kvh, C, T, graph.BF16, 0))
					t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
					// At most 7 ranges: each is a group of 128 rows, which the emulator runs
					// one after another.
					c.splits = min(max(gpu.CUDA.PrefillAttentionSplits(T, G*kvh, kvh, D), 3), 7)
					c.name += fmt.Sprintf("/split%d", c.splits)
					t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
				}
			}
		}
	}
	c := fa2(prefillCase(r, 256, 8, 2, 75, 130, graph.BF16, 0))
	t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	for _, tc := range []struct{ D, G, kvh, C, T, splits int }{
		{64, 8, 1, 40, 9, 4}, {128, 2, 2, 301, 21, 7}, {64, 1, 1, 45, 40, 3}, {256, 8, 2, 45, 9, 3}, {256, 8, 2, 200, 20, 5},
	} {
		c := partialCase(fa2(prefillCase(r, tc.D, tc.G, tc.kvh, tc.C, tc.T, graph.BF16, 0)), tc.splits)
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}
