package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Decode kernels of the normattn fusions: the Gated DeltaNet's gated RMSNorm applied in
// its output projection's prologue (gated_rms_norm_matvec_q4).

// gatedNormMatvecHead is the head width D of a gated_rms_norm_matmul that
// gated_rms_norm_matvec_q4 runs: one decode row x [.., D] with its gate z of the same
// shape, a dense norm weight [D] and a q4 projection of inner dimension K = the row's
// length. The kernel reduces a head's sum of squares over the D/32 lanes holding its
// chunks, so D/32 must be a power of two no larger than the lanes of a row group, and D
// must divide K.
func gatedNormMatvecHead(in []Operand) (D int, ok bool) {
	x, z, wn, w := in[0], in[1], in[2], in[3]
	if len(x.Shape) == 0 || len(wn.Shape) != 1 || !decodeQ4(x, w) {
		return 0, false
	}
	D = x.Shape[len(x.Shape)-1]
	K := w.Shape[1]
	chunks := D / 32
	ok = D%32 == 0 && chunks&(chunks-1) == 0 && chunks <= kernels.MatvecLanes(K) && K%D == 0 && wn.Shape[0] == D &&
		x.DType == graph.F32 && z.DType == graph.F32 && slices.Equal(x.Shape, z.Shape) && z.Addr%16 == 0 &&
		(wn.DType == graph.F32 || wn.DType == graph.BF16 || wn.DType == graph.F16)
	return D, ok
}

func supportsGatedNormMatvec(_ graph.Attrs, in, _ []Operand) bool {
	_, ok := gatedNormMatvecHead(in)
	return ok
}

// lowerGatedNormMatvec: the gated norm and the output projection of a decode row in one
// launch, on the q4 matrix-vector tiles.
func lowerGatedNormMatvec(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, z, wn, w := in[0], in[1], in[2], in[3]
	D, ok := gatedNormMatvecHead(in)
	if !ok {
		return nil, fmt.Errorf("gated_rms_norm_matmul: x %s%v, z %s%v, norm %s%v, weight %s%v are not one decode row of whole heads against a q4 weight; the plan should have expanded it",
			x.DType, x.Shape, z.DType, z.Shape, wn.DType, wn.Shape, w.DType, w.Shape)
	}
	M, K := w.Shape[0], w.Shape[1]
	return newKernel(kernels.KernelGatedNormMVQ4, matvecGrid(M, K, 1), kernels.MatvecThreads, kernels.GatedNormMatvecArgs{
		W: w.W, Norm: wn.W, X: x.Addr, Z: z.Addr, Y: out[0].Addr, M: int32(M), K: int32(K), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}
