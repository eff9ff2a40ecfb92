package kernelcheck

import (
	"math/rand/v2"

	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
)

// attentionBlocksCases check decode's fixed-block key split (split-attention from
// [attention] key_block_split_from keys on) as the pair a plan launches, attention_gqa
// writing the partial states of the ranges in use and attention_merge reading only those,
// against attention's reference. The partial states sit in memory filled with NaN, so a
// merge that read a range no group wrote fails. The rule: blocks of 32 keys from 41 keys
// seen, 3 equal ranges before, on a grid of 16 ranges: below the switch (C 20), at it
// (C 40), past it (C 200: 7 blocks), and past the grid (C 700: 15 ranges of 48 keys).
func attentionBlocksCases() []Case {
	r := rand.New(rand.NewPCG(31, 32))
	rule := ops.KeyRanges{Splits: 16, Block: kernels.AttnKeyBlock, BlockFrom: 41, BlockKeys: 32, ShortSplits: 3}
	var cases []Case
	for _, c := range []struct {
		name string
		C    int
		dt   graph.DType
	}{{"below the switch", 20, graph.F32}, {"at the switch bf16", 40, graph.BF16}, {"past the switch", 200, graph.F32}, {"past the grid bf16", 700, graph.BF16}} {
		cache := func() *ops.Tensor {
			if c.dt == graph.BF16 {
				return randtensor.BF16(r, c.C+1, 2, 128)
			}
			return randtensor.F32(r, c.C+1, 2, 128)
		}
		cases = append(cases, Case{name: "attention fixed key blocks " + c.name, op: "attention", attrs: graph.Attrs{"scale": 0.088},
			in: []*ops.Tensor{randtensor.F32(r, 1, 16, 128), cache(), cache()}, C: c.C, launch: attentionBlocks(0.088, rule)})
	}
	return cases
}

func attentionBlocks(scale float32, rule ops.KeyRanges) func(e *env) []Launch {
	return func(e *env) []Launch {
		a := attentionArgs(e, scale, int32(rule.Splits))
		rows := int(a.T * a.NH)
		a.Work = e.mem.Alloc(rows*rule.Splits*int(a.D+2)*4, 0xff)
		a.BlockFrom, a.BlockKeys, a.ShortSplits = int32(rule.BlockFrom), int32(rule.BlockKeys), int32(rule.ShortSplits)
		merge := kernels.AttentionMergeArgs{Work: a.Work, O: e.out[0].addr, Steps: e.steps, Rows: int32(rows), D: a.D, Splits: a.Splits, NH: a.NH,
			BlockFrom: a.BlockFrom, BlockKeys: a.BlockKeys, ShortSplits: a.ShortSplits}
		return []Launch{
			{kernels.KernelAttentionGQA, [3]int{int(a.KVH), int(a.T), rule.Splits}, 256, a},
			{kernels.KernelAttentionMerge, [3]int{rows, 1, 1}, 256, merge},
		}
	}
}
