package ops

import (
	"fmt"
	"slices"
	"sync"

	"pistil/graph"
)

// expertSwiGLUInt8 is expert_matmul_swiglu's routed experts under int8 activations (x one
// row per token, gate and up q4 stacks of one shape): the unfused ops' work in one pass.
// refExpertMatmul runs gate and up as two calls, each quantizing every token's row and
// gathering each expert's rows, each writing its [T·k, M] result to memory (8 MB for a
// 512-token chunk of the 35B-A3B), which siluGate then reads back; here the rows are
// quantized and gathered once, and each work item (an expert and 64 of its weight rows)
// computes gate and up into a worker's scratch and writes silu(gate)·up once. Every sum
// is the unfused path's (the same kernels on the same bytes, the same tiles) and the SiLU
// the same function of it, so the result is the same to the bit
// (TestExpertSwiGLUInt8MatchesUnfused). It reports false, having done nothing, where it
// does not apply.
func expertSwiGLUInt8(env *Env, v *graph.Value, x, wgt, wut, idt, out *Tensor) (bool, error) {
	// Rows of whole work items: each row's SiLU then runs on whole vectors, as siluGate's
	// over the whole result does (its vector and scalar loops round alike only within
	// TestSiLUVectorKernel's bound, not to the bit).
	if len(x.Shape) != 2 || !slices.Equal(wgt.Shape, wut.Shape) || wgt.DType != wut.DType || wgt.Group != wut.Group ||
		len(wgt.Shape) != 3 || wgt.Shape[1]%expertRowBlock != 0 {
		return false, nil
	}
	wg, err := newWeightRows(wgt)
	if err != nil {
		return false, fmt.Errorf("gate: %s weight: %w", v.Op, err)
	}
	wu, err := newWeightRows(wut)
	if err != nil {
		return false, fmt.Errorf("up: %s weight: %w", v.Op, err)
	}
	wg, wu = wg.forEnv(env), wu.forEnv(env)
	if wg.reference || !int8Fits(env, wg, 2) {
		return false, nil
	}
	E, M, K := wgt.Shape[0], wgt.Shape[1], wgt.Shape[2]
	T, k := idt.Shape[0], idt.Shape[1]
	xs, y := x.F32(), out.F32()
	rowsOf, used, err := routedRows(v.Op, idt.I32()[:T*k], k, E)
	if err != nil {
		return true, err
	}
	token := func(s int) []float32 { return xs[s*K : (s+1)*K] }
	quantized := newInt8Source(env, wg, T, token)
	// An expert with one routed row takes the row kernel under "int8-all" and the float32
	// kernels otherwise, as refExpertMatmul does.
	acts := make([]*quantActs, len(used))
	parallelItems(env, len(used), func(_, i int) {
		rows := rowsOf[i]
		if len(rows) > 1 || int8Fits(env, wg, 1) {
			acts[i] = quantized.gather(wg, len(rows), func(p int) int { return rows[p] / k })
			return
		}
		acts[i] = prepareActsFrom(env.serial(), wg, 1, func(int) []float32 { return token(rows[0] / k) })
	})
	quantized.release() // gathered: every expert's rows are in its own acts
	rowBlock := expertItemRows(T, true)
	blocks := (M + rowBlock - 1) / rowBlock
	scratch := make([]*swigluScratch, env.workers())
	// A run of work items (from parallelExpertItems) of one expert: gate's rows over the
	// run in one stream, then up's, then the SiLU block by block, as each item alone would.
	run := func(worker, i, blkLo, blkHi int) {
		e, rows := used[i], rowsOf[i]
		lo, hi := blkLo*rowBlock, min(blkHi*rowBlock, M)
		if scratch[worker] == nil {
			scratch[worker] = swigluScratchPool.Get().(*swigluScratch)
		}
		gate, up := scratch[worker].grow(len(rows) * M)
		mulQuant(acts[i], wg, e*M, lo, hi, func(p int) []float32 { return gate[p*M : (p+1)*M] })
		mulQuant(acts[i], wu, e*M, lo, hi, func(p int) []float32 { return up[p*M : (p+1)*M] })
		for b0 := lo; b0 < hi; b0 += expertRowBlock {
			b1 := min(b0+expertRowBlock, hi)
			for p, r := range rows {
				siluGateRange(true, y[r*M+b0:r*M+b1], gate[p*M+b0:p*M+b1], up[p*M+b0:p*M+b1])
			}
		}
	}
	parallelExpertRuns(env, rowsOf, blocks, run)
	for _, s := range scratch {
		if s != nil {
			swigluScratchPool.Put(s)
		}
	}
	for _, a := range acts {
		a.release()
	}
	return true, nil
}

// swigluScratch is a worker's gate and up results for one work item of expertSwiGLUInt8
// (the expert's rows by M; a work item fills its 64 columns), pooled across calls.
type swigluScratch struct{ gate, up []float32 }

var swigluScratchPool = sync.Pool{New: func() any { return &swigluScratch{} }}

func (s *swigluScratch) grow(n int) (gate, up []float32) {
	if cap(s.gate) < n {
		s.gate, s.up = make([]float32, n), make([]float32, n)
	}
	return s.gate[:n], s.up[:n]
}
