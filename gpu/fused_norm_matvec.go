package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// add_rms_norm_matmuls (the norm-matvec passes): a decode step's residual add and RMSNorm
// inside the matrix-vector kernel of the projections that read the normed row
// (kernels.MatvecArgs.Norm). Every group of those kernels reads the whole row anyway (its
// warps or threads share out K), so it sums the squares of a + b as it loads them and
// scales its products by the norm at the end; no group waits for a norm kernel, and the
// step has one launch and one stage fewer per norm. The groups write the sum (the
// residual stream) between them, and the normed row where other dispatches read it.
//
// Two kernels take it: one q8 weight (the router) on matvec_q8_norm, and up to
// kernels.MaxFused q4 weights (the layers' input projections, the lm_head) on
// matvec_fused_norm_staged_q4, the staged tensor-core twin of matvec_fused_q4 with the
// norm (no other form of the twins has it): the dispatch must be marked for the staged
// twins (mma-matvec and staged-matvec on, imma-matvec off), which the pass checks before
// it fuses.

// AttrNormRowUnread (bool) says no other dispatch reads an add_rms_norm_matmuls's normed
// row (norm-matvec-q4 sets it: the layers' input projections and the lm_head are its
// only readers), so the kernel does not write it; the sum is always written.
const AttrNormRowUnread = "norm_row_unread"

// normMatvecRow says whether a, b and the norm's weight are one decode row of K the
// kernels read in 16-byte vectors.
func normMatvecRow(a, b, w Operand, K int) bool {
	return K > 0 && K%16 == 0 && a.DType == graph.F32 && b.DType == graph.F32 && slices.Equal(a.Shape, b.Shape) &&
		prod(a.Shape) == K && a.Addr%16 == 0 && b.Addr%16 == 0 &&
		len(w.Shape) == 1 && w.Shape[0] == K && (w.DType == graph.F32 || w.DType == graph.BF16 || w.DType == graph.F16)
}

// normMatvecQ8 says whether the projections are the one q8 weight matvec_q8_norm takes.
func normMatvecQ8(ws []Operand, K int) bool {
	return len(ws) == 1 && len(ws[0].Shape) == 2 && ws[0].DType == graph.Q8 && ws[0].Shape[1] == K && ws[0].W.Group%16 == 0 &&
		K <= kernels.MatvecQ8NormMaxK
}

// NormMatvecShape says whether a decode add_rms_norm_matmuls with these operands (a, b,
// the norm's weight, the projections' weights) has a kernel on this target: one q8
// weight, or, when staged says the dispatch will be marked for the staged twins, q4
// weights they take.
func (t *Target) NormMatvecShape(in []Operand, staged bool) bool {
	if len(in) < 4 || len(in[1].Shape) == 0 {
		return false
	}
	K := in[1].Shape[len(in[1].Shape)-1]
	if !normMatvecRow(in[0], in[1], in[2], K) {
		return false
	}
	if normMatvecQ8(in[3:], K) {
		return true
	}
	return staged && supportsMatmuls(nil, append([]Operand{in[0]}, in[3:]...), nil) && t.StagedMatvecShape("add_rms_norm_matmuls", in)
}

func supportsAddRMSNormMatmuls(_ graph.Attrs, in, _ []Operand) bool {
	if len(in) < 4 || len(in[1].Shape) == 0 {
		return false
	}
	K := in[1].Shape[len(in[1].Shape)-1]
	return normMatvecRow(in[0], in[1], in[2], K) &&
		(normMatvecQ8(in[3:], K) || supportsMatmuls(nil, append([]Operand{in[0]}, in[3:]...), nil))
}

func lowerAddRMSNormMatmuls(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if !supportsAddRMSNormMatmuls(d.Attrs, in, out) {
		return nil, fmt.Errorf("add_rms_norm_matmuls: a %s%v and b %s%v with weights %d: not one decode row against one q8 or up to %d q4 weights; the plan should have expanded it",
			in[0].DType, in[0].Shape, in[1].DType, in[1].Shape, len(in)-3, kernels.MaxFused)
	}
	a, b, wn, ws := in[0], in[1], in[2], in[3:]
	K := prod(a.Shape)
	args := kernels.MatvecArgs{X: a.Addr, K: int32(K), Mode: kernels.MatvecSeparate,
		Norm: kernels.NormInput{B: b.Addr, S: out[0].Addr, Y: out[1].Addr, W: wn.W, Eps: float32(d.Attrs.Float("eps"))}}
	if d.Attrs.Bool(AttrNormRowUnread) {
		args.Norm.Y = 0
	}
	maxM := 0
	for i, w := range ws {
		args.W[i], args.Y[i], args.M[i] = w.W, out[2+i].Addr, int32(w.Shape[0])
		maxM = max(maxM, w.Shape[0])
	}
	if normMatvecQ8(ws, K) {
		return newKernel(kernels.KernelMatvecQ8Norm, [3]int{ceilDiv(maxM, kernels.MatvecQ8Rows), 1, 1}, kernels.MatvecThreads, args)
	}
	if !d.Attrs.Bool(AttrStagedMatvec) {
		return nil, fmt.Errorf("add_rms_norm_matmuls of q4 weights runs only on the staged tensor-core twins (marked %s by mma-matvec and staged-matvec, imma-matvec off); norm-matvec-q4 should not have fused it", AttrStagedMatvec)
	}
	l, err := matvecLaunch(c, d, kernels.KernelMatvecFusedQ4, maxM, K, len(ws), args, ws...)
	if err != nil {
		return nil, err
	}
	if l.Kernel != kernels.KernelMatvecFusedStagedQ4 {
		return nil, fmt.Errorf("add_rms_norm_matmuls: the q4 projections lowered to %s, which has no prologue norm (want %s)", l.Kernel, kernels.KernelMatvecFusedStagedQ4)
	}
	l.Kernel = kernels.KernelMatvecFusedNormStagedQ4 // the same grid, group and args, with the norm's code
	return l, nil
}
