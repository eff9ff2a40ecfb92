package kernelcheck

import (
	"math/rand/v2"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
)

// attentionPrefillCases check attention_prefill as gpu.Metal lowers it for a plan whose
// tile-attention pass marked the attention: Metal's 8-key tiles (4 lanes per key after
// the reduction, where CUDA's 16-key tiles leave 2), the model's 8 query heads per kv
// head of dim 256 and a bf16 cache, query tiles cut short by T, and the split form,
// whose partial states are attention_partial's own: at C 45 over 3 ranges the tokens'
// ranges differ in width inside one query tile (16 keys up to 48 keys seen, 32 beyond)
// and the last range of the later tokens is empty.
func attentionPrefillCases() []Case {
	r := rand.New(rand.NewPCG(21, 22))
	tiled := func(scale float64) graph.Attrs {
		return graph.Attrs{"scale": scale, gpu.AttrPrefillTiled: int64(1)}
	}
	cache := func(dt graph.DType, rows, kvh, d int) *ops.Tensor {
		if dt == graph.BF16 {
			return randtensor.BF16(r, rows, kvh, d)
		}
		return randtensor.F32(r, rows, kvh, d)
	}
	return []Case{
		{name: "attention_prefill 8 heads per kv head D 256 bf16", op: "attention", attrs: tiled(0.0625),
			in: []*ops.Tensor{randtensor.F32(r, 11, 16, 256), cache(graph.BF16, 40, 2, 256), cache(graph.BF16, 40, 2, 256)}, C: 25},
		{name: "attention_prefill 2 heads per kv head, 37 tokens", op: "attention", attrs: tiled(0.125),
			in: []*ops.Tensor{randtensor.F32(r, 37, 4, 64), cache(graph.F32, 60, 2, 64), cache(graph.F32, 60, 2, 64)}, C: 20},
		{name: "attention_prefill one head per kv head, empty context", op: "attention", attrs: tiled(0.125),
			in: []*ops.Tensor{randtensor.F32(r, 5, 1, 128), cache(graph.F32, 8, 1, 128), cache(graph.F32, 8, 1, 128)}},
		{name: "attention_prefill split", op: "attention_partial",
			attrs: graph.Attrs{"scale": 0.125, "splits": 3, "key_block": kernels.AttnKeyBlock, gpu.AttrPrefillTiled: int64(1)},
			in:    []*ops.Tensor{randtensor.F32(r, 9, 8, 64), cache(graph.BF16, 60, 1, 64), cache(graph.BF16, 60, 1, 64)}, C: 45},
	}
}
