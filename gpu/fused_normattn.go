package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Kernels of the normattn fusions: the Gated DeltaNet's gated RMSNorm applied in its
// output projection's prologue (gated_rms_norm_matvec_q4, decode), and attention's q/k
// norm and RoPE reading the query heads in place from q_proj's output
// (slice_rms_norm_rope) or writing the keys straight into the cache
// (rms_norm_rope_append), both the rope kernel.

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

// AttrGatedNormMatvec (int 1) asks for gated_rms_norm_matvec_q4 where it applies (the
// compiler's gated-norm-matvec pass); unmarked, gated_rms_norm_matmul expands.
const AttrGatedNormMatvec = "gated_norm_matvec"

func supportsGatedNormMatvec(attrs graph.Attrs, in, _ []Operand) bool {
	_, ok := gatedNormMatvecHead(in)
	return ok && attrs.Int(AttrGatedNormMatvec) != 0
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

// sliceRoPEWidth is the width of the sliced axis when slice_rms_norm_rope's slice is a
// range of the last axis of a rank-3 f32 x, which the rope kernel reads in place.
func sliceRoPEWidth(attrs graph.Attrs, in []Operand) (start, width int, ok bool) {
	x := in[0]
	if len(x.Shape) != 3 || x.DType != graph.F32 || attrs.Int("axis") != 2 {
		return 0, 0, false
	}
	start, end := attrs.Int("start"), attrs.Int("end")
	return start, x.Shape[2], start >= 0 && end > start && end <= x.Shape[2]
}

func supportsSliceRMSNormRoPE(attrs graph.Attrs, in, _ []Operand) bool {
	_, _, ok := sliceRoPEWidth(attrs, in)
	return ok
}

// lowerSliceRMSNormRoPE: rms_norm_rope over head rows that start every width elements of
// x, at the slice's start.
func lowerSliceRMSNormRoPE(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	start, width, ok := sliceRoPEWidth(d.Attrs, in)
	if !ok {
		return nil, fmt.Errorf("slice_rms_norm_rope: slice [%d, %d) of axis %d of %s%v is not a range of the last axis of a rank-3 f32 row; the plan should have expanded it",
			d.Attrs.Int("start"), d.Attrs.Int("end"), d.Attrs.Int("axis"), x.DType, x.Shape)
	}
	heads := Operand{Addr: x.Addr + 4*uint64(start), W: x.W, DType: x.DType, Shape: out[0].Shape}
	heads.W.Data = heads.Addr
	l, err := lowerRMSNormRoPE(c, d, []Operand{heads, in[1]}, out)
	if err != nil {
		return nil, err
	}
	l.Args.(*kernels.RoPEArgs).XRow = int32(width)
	return l, nil
}

func supportsRMSNormRoPEAppend(_ graph.Attrs, in, _ []Operand) bool {
	cache := in[0]
	return len(cache.Shape) == 3 && (cache.DType == graph.F32 || cache.DType == graph.BF16)
}

// lowerRMSNormRoPEAppend: rms_norm_rope whose head rows go to the cache's rows C+t.
func lowerRMSNormRoPEAppend(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	cache, x := in[0], in[1]
	if err := wantRank(d, cache, "cache", 3); err != nil {
		return nil, err
	}
	dt, err := stateCode(d, cache)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) != 3 || x.Shape[1] != cache.Shape[1] || x.Shape[2] != cache.Shape[2] {
		return nil, fmt.Errorf("rms_norm_rope_append: x %v does not have the cache's %v heads of its rows", x.Shape, cache.Shape)
	}
	l, err := lowerRMSNormRoPE(c, d, in[1:], out)
	if err != nil {
		return nil, err
	}
	a := l.Args.(*kernels.RoPEArgs)
	a.Append, a.YDType = 1, dt
	return l, nil
}
