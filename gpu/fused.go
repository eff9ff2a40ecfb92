package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Fused ops of the fusion passes (ops/fused*.go) that have a kernel of their own. Some
// always do (add_rms_norm, gdn_gates, conv1d_silu, rms_norm_rope); the fused matmuls
// have one only for a single activation row against q4 weights (decode; gated_rms_norm_matmul
// also needs whole heads the kernel can reduce, gpu/fused_normattn.go), and
// slice_l2_norm only when the slice is whole heads. Where supports says no, the
// compiler's expand-for-backend pass rewrites the op into the ops it fuses, each a
// planned dispatch of its own. matmul_router has a kernel only on a target with a
// device-scope fence, for one token against q8 weights, when the router-matvec pass asks
// for it (router_q8.go); otherwise it expands into the projection and the router.
type fusedKernel struct {
	supports func(attrs graph.Attrs, in, out []Operand) bool
	lower    lowering
}

var fusedKernels = map[string]fusedKernel{
	"add_rms_norm":          {supportsAddRMSNorm, lowerAddRMSNorm},
	"gdn_gates":             {always, lowerGDNGates},
	"conv1d_silu":           {always, lowerConv1DSiLU},
	"conv1d_silu_l2":        {supportsConvSiLUL2, lowerConvSiLUL2},
	"rms_norm_rope":         {always, lowerRMSNormRoPE},
	"slice_l2_norm":         {supportsSliceL2Norm, lowerSliceL2Norm},
	"matmuls":               {supportsMatmuls, lowerMatmuls},
	"matmul_swiglu":         {supportsMatmulSwiGLU, lowerMatmulSwiGLU},
	"expert_matmul_swiglu":  {supportsExpertMatmulSwiGLU, lowerExpertMatmulSwiGLU},
	"matmul_gated_add":      {supportsMatmulGatedAdd, lowerMatmulGatedAdd},
	"expert_matmul_combine": {supportsExpertCombine, lowerExpertCombine},
	"sigmoid_gate_matmul":   {supportsSigmoidGateMatmul, lowerSigmoidGateMatmul},
	"gated_rms_norm_matmul": {supportsGatedNormMatvec, lowerGatedNormMatvec},
	"slice_rms_norm_rope":   {supportsSliceRMSNormRoPE, lowerSliceRMSNormRoPE},
	"rms_norm_rope_append":  {supportsRMSNormRoPEAppend, lowerRMSNormRoPEAppend},
	"gated_delta_norm":      {supportsGatedDeltaNorm, lowerGatedDeltaNorm},       // fused_delta_norm.go
	"add_rms_norm_matmuls":  {supportsAddRMSNormMatmuls, lowerAddRMSNormMatmuls}, // fused_norm_matvec.go
	// fused_moefuse.go
	"expert_matmul_swiglu_shared":  {supportsExpertSwiGLUShared, lowerExpertSwiGLUShared},
	"expert_matmul_combine_shared": {supportsExpertCombineShared, lowerExpertCombineShared},
	"expert_route_swiglu_shared":   {supportsExpertRouteSwiGLUShared, lowerExpertRouteSwiGLUShared},
}

func always(graph.Attrs, []Operand, []Operand) bool { return true }

func supportsAddRMSNorm(_ graph.Attrs, in, _ []Operand) bool {
	a, b := in[0], in[1]
	return slices.Equal(a.Shape, b.Shape) && a.DType == graph.F32 && b.DType == graph.F32
}

func lowerAddRMSNorm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	a, b, w := in[0], in[1], in[2]
	if !supportsAddRMSNorm(d.Attrs, in, out) {
		return nil, fmt.Errorf("add_rms_norm: a %s%v and b %s%v must be f32 of one shape", a.DType, a.Shape, b.DType, b.Shape)
	}
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	D := a.Shape[len(a.Shape)-1]
	rows := prod(a.Shape) / D
	return newKernel(kernels.KernelRMSNorm, [3]int{rows, 1, 1}, rowBlock(D), kernels.RMSNormArgs{
		X: a.Addr, B: b.Addr, S: out[0].Addr, Y: out[1].Addr, W: w.W, Rows: int32(rows), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerGDNGates(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	a, b, aLog, dtBias := in[0], in[1], in[2], in[3]
	if err := wantRank(d, a, "a", 2); err != nil {
		return nil, err
	}
	for i, o := range []Operand{aLog, dtBias} {
		if _, err := denseCode(d, o, []string{"A_log", "dt_bias"}[i]); err != nil {
			return nil, err
		}
	}
	T, Hv := a.Shape[0], a.Shape[1]
	return newKernel(kernels.KernelGDNGates, elementGrid(T*Hv), 256, kernels.GDNGatesArgs{
		A: a.Addr, B: b.Addr, G: out[0].Addr, Beta: out[1].Addr, ALog: aLog.W, DtBias: dtBias.W, T: int32(T), Hv: int32(Hv)})
}

func lowerConv1DSiLU(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	l, err := lowerConv1D(c, d, in, out)
	if err != nil {
		return nil, err
	}
	l.Args.(*kernels.Conv1DArgs).SiLU = 1
	return l, nil
}

// sliceL2Heads gives the slice's attrs when it takes whole heads of the last axis, which
// the l2_norm kernel reads in place.
func sliceL2Heads(attrs graph.Attrs, in, out []Operand) (start, end int, ok bool) {
	x, y := in[0], out[0]
	axis := attrs.Int("axis")
	start, end = attrs.Int("start"), attrs.Int("end")
	D := y.Shape[len(y.Shape)-1]
	return start, end, axis == len(x.Shape)-1 && start >= 0 && end <= x.Shape[axis] && end > start && D > 0 && (end-start)%D == 0
}

func supportsSliceL2Norm(attrs graph.Attrs, in, out []Operand) bool {
	_, _, ok := sliceL2Heads(attrs, in, out)
	return ok
}

func lowerSliceL2Norm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, y := in[0], out[0]
	start, end, ok := sliceL2Heads(d.Attrs, in, out)
	if !ok {
		return nil, fmt.Errorf("slice_l2_norm: slice [%d, %d) of axis %d of %v is not whole heads of the last axis; the plan should have expanded it", start, end, d.Attrs.Int("axis"), x.Shape)
	}
	D := y.Shape[len(y.Shape)-1]
	rows := prod(y.Shape) / D
	return newKernel(kernels.KernelL2Norm, [3]int{rows, 1, 1}, rowBlock(D), kernels.L2NormArgs{
		X: x.Addr, Y: y.Addr, Rows: int32(rows), D: int32(D), Eps: float32(d.Attrs.Float("eps")), Scale: float32(d.Attrs.Float("scale")),
		RowsPerOuter: int32((end - start) / D), OuterStride: int32(x.Shape[len(x.Shape)-1]), Start: int32(start)})
}

func lowerRMSNormRoPE(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if _, err := denseCode(d, in[1], "weight"); err != nil {
		return nil, err
	}
	l, err := lowerRoPE(c, d, in[:1], out)
	if err != nil {
		return nil, err
	}
	a := l.Args.(*kernels.RoPEArgs)
	a.W, a.Eps, a.Norm = in[1].W, float32(d.Attrs.Float("eps")), 1
	return l, nil
}

// decodeQ4 says whether x is one activation row that the fused q4 matrix-vector
// kernels can multiply by every weight in ws.
func decodeQ4(x Operand, ws ...Operand) bool {
	for _, w := range ws {
		if len(w.Shape) != 2 || !q4Matvec(w, w.Shape[1]) || prod(x.Shape) != w.Shape[1] || x.Addr%16 != 0 {
			return false
		}
	}
	return len(ws) > 0
}

// expertQ4 says whether the routed q4 matrix-vector kernels take x against the stacked
// weights ws for these ids: few enough routed slots, every weight q4 of one shape.
func expertQ4(x, ids Operand, ws ...Operand) bool {
	if len(ids.Shape) != 2 || ids.Shape[0]*ids.Shape[1] >= expertTiledMinSlots || x.Addr%16 != 0 {
		return false
	}
	for _, w := range ws {
		if len(w.Shape) != 3 || !slices.Equal(w.Shape, ws[0].Shape) || !q4Matvec(w, w.Shape[2]) {
			return false
		}
	}
	return len(ws) > 0
}

// matvecGrid covers M rows of inner dimension K with the q4 matrix-vector kernels' tiles.
func matvecGrid(M, K, y int) [3]int { return [3]int{ceilDiv(M, kernels.MatvecRowsPerGroup(K)), y, 1} }

func supportsMatmuls(_ graph.Attrs, in, _ []Operand) bool {
	return len(in)-1 <= kernels.MaxFused && decodeQ4(in[0], in[1:]...)
}

// lowerMatmuls: the projections of one decode row side by side in one launch.
func lowerMatmuls(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	ws := in[1:]
	args := kernels.MatvecArgs{X: in[0].Addr, K: int32(ws[0].Shape[1]), Mode: kernels.MatvecSeparate}
	maxM := 0
	for i, w := range ws {
		args.W[i], args.Y[i], args.M[i] = w.W, out[i].Addr, int32(w.Shape[0])
		maxM = max(maxM, w.Shape[0])
	}
	return matvecLaunch(c, d, kernels.KernelMatvecFusedQ4, maxM, int(args.K), len(ws), args, ws...)
}

func supportsMatmulSwiGLU(_ graph.Attrs, in, _ []Operand) bool {
	return decodeQ4(in[0], in[1], in[2]) && slices.Equal(in[1].Shape, in[2].Shape)
}

// lowerMatmulSwiGLU: gate and up projections of a decode row with silu(gate)·up in the
// epilogue.
func lowerMatmulSwiGLU(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, wg, wu := in[0], in[1], in[2]
	M := wg.Shape[0]
	return matvecLaunch(c, d, kernels.KernelMatvecFusedQ4, M, wg.Shape[1], 1, kernels.MatvecArgs{
		W: [kernels.MaxFused]kernels.Weight{wg.W, wu.W}, Y: [kernels.MaxFused]uint64{out[0].Addr}, M: [kernels.MaxFused]int32{int32(M), int32(M)},
		X: x.Addr, K: int32(wg.Shape[1]), Mode: kernels.MatvecSwiGLU}, wg, wu)
}

func supportsExpertMatmulSwiGLU(_ graph.Attrs, in, _ []Operand) bool {
	return expertQ4(in[0], in[3], in[1], in[2])
}

// lowerExpertMatmulSwiGLU: the routed experts' gate and up projections with the
// activation in the epilogue, one SIMD group per (rows, slot).
func lowerExpertMatmulSwiGLU(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, wg, wu, ids := in[0], in[1], in[2], in[3]
	E, M, K := wg.Shape[0], wg.Shape[1], wg.Shape[2]
	args := kernels.ExpertArgs{W: wg.W, W2: wu.W, X: x.Addr, Ids: ids.Addr, Y: out[0].Addr, T: int32(ids.Shape[0]),
		TopK: int32(ids.Shape[1]), E: int32(E), M: int32(M), K: int32(K)}
	if len(x.Shape) == 3 {
		args.XPerSlot = 1
	}
	return matvecLaunch(c, d, kernels.KernelExpertMVSwiGLUQ4, M, K, ids.Shape[0]*ids.Shape[1], args, wg, wu)
}

func supportsMatmulGatedAdd(_ graph.Attrs, in, out []Operand) bool {
	x, w, gate, other := in[0], in[1], in[2], in[3]
	return decodeQ4(x, w) && prod(gate.Shape) == 1 && slices.Equal(other.Shape, out[0].Shape) && other.DType == graph.F32
}

// lowerMatmulGatedAdd: other + (x·Wᵀ)·sigmoid(gate) for a decode row.
func lowerMatmulGatedAdd(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, w, gate, other := in[0], in[1], in[2], in[3]
	M := w.Shape[0]
	return matvecLaunch(c, d, kernels.KernelMatvecFusedQ4, M, w.Shape[1], 1, kernels.MatvecArgs{
		W: [kernels.MaxFused]kernels.Weight{w.W}, Y: [kernels.MaxFused]uint64{out[0].Addr}, M: [kernels.MaxFused]int32{int32(M)},
		X: x.Addr, K: int32(w.Shape[1]), RowGate: gate.Addr, Other: other.Addr, Mode: kernels.MatvecSeparate}, w)
}

func supportsExpertCombine(_ graph.Attrs, in, _ []Operand) bool { return expertQ4(in[0], in[2], in[1]) }

// lowerExpertCombine: the routed experts' down projections weighted and summed per token.
func lowerExpertCombine(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, w, ids, weights := in[0], in[1], in[2], in[3]
	T, k, M := ids.Shape[0], ids.Shape[1], w.Shape[1]
	args := kernels.ExpertArgs{W: w.W, X: x.Addr, Ids: ids.Addr, Y: out[0].Addr, Weights: weights.Addr, T: int32(T),
		TopK: int32(k), E: int32(w.Shape[0]), M: int32(M), K: int32(w.Shape[2])}
	if len(x.Shape) == 3 {
		args.XPerSlot = 1
	}
	return newKernel(kernels.KernelExpertMVCombineQ4, [3]int{ceilDiv(M, c.t.CombineRows), T, 1}, kernels.MatvecThreads, args)
}

func supportsSigmoidGateMatmul(_ graph.Attrs, in, _ []Operand) bool {
	a, g, w := in[0], in[1], in[2]
	return decodeQ4(a, w) && slices.Equal(a.Shape, g.Shape) && g.DType == graph.F32 && g.Addr%16 == 0
}

// lowerSigmoidGateMatmul: (a·sigmoid(g))·Wᵀ for a decode row, the gate in the prologue.
func lowerSigmoidGateMatmul(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	a, g, w := in[0], in[1], in[2]
	M := w.Shape[0]
	return matvecLaunch(c, d, kernels.KernelMatvecFusedQ4, M, w.Shape[1], 1, kernels.MatvecArgs{
		W: [kernels.MaxFused]kernels.Weight{w.W}, Y: [kernels.MaxFused]uint64{out[0].Addr}, M: [kernels.MaxFused]int32{int32(M)},
		X: a.Addr, XGate: g.Addr, K: int32(w.Shape[1]), Mode: kernels.MatvecSeparate}, w)
}
