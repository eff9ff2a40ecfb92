//go:build linux

package cuda

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Fused ops of the fusion passes (ops/fused*.go). Where a kernel covers the whole op it
// is one launch (add_rms_norm, gdn_gates, conv1d_silu, slice_l2_norm, rms_norm_rope);
// the others run as stages of the primitive kernels over dispatch-private scratch (the
// op's expansion), so every plan the passes make runs, and fused matmul kernels can
// replace a composite without touching the rest.

// composite lowers one dispatch to stages of launches: the launches of a stage may run
// concurrently, each stage waits for the one before.
type composite func(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error)

var composites = map[string]composite{
	"add_rms_norm":          single(lowerAddRMSNorm),
	"gdn_gates":             single(lowerGDNGates),
	"conv1d_silu":           single(lowerConv1DSiLU),
	"slice_l2_norm":         lowerSliceL2Norm,
	"rms_norm_rope":         single(lowerRMSNormRoPE),
	"matmuls":               lowerMatmuls,
	"matmul_swiglu":         lowerMatmulSwiGLU,
	"expert_matmul_swiglu":  lowerMatmulSwiGLU,
	"matmul_gated_add":      lowerMatmulGatedAdd,
	"matmul_router":         lowerMatmulRouter,
	"expert_matmul_combine": lowerExpertCombine,
	"sigmoid_gate_matmul":   lowerSigmoidGateMatmul,
	"gated_rms_norm_matmul": lowerGatedNormMatmul,
}

func single(l lowering) composite {
	return func(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
		ln, err := l(c, d, in, out)
		if err != nil {
			return nil, err
		}
		return [][]*launch{{ln}}, nil
	}
}

// temp is dispatch-private f32 scratch of the given shape.
func (c *lowerCtx) temp(shape ...int) (operand, error) {
	addr, err := c.work(4 * int64(prod(shape)))
	if err != nil {
		return operand{}, err
	}
	return operand{addr: addr, w: weightOf(addr, kernels.DTF32), dtype: graph.F32, shape: shape}, nil
}

// matmulFor lowers x·Wᵀ (dense or quantized, plain or routed by ids) into y.
func matmulFor(c *lowerCtx, d *plan.Dispatch, x, w, y operand, ids *operand) (*launch, error) {
	if ids != nil {
		return lowerExpert(c, d, []operand{x, w, *ids}, []operand{y})
	}
	return lowerMatmul(c, d, []operand{x, w}, []operand{y})
}

func lowerAddRMSNorm(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	a, b, w := in[0], in[1], in[2]
	if !slices.Equal(a.shape, b.shape) || a.dtype != graph.F32 || b.dtype != graph.F32 {
		return nil, fmt.Errorf("add_rms_norm: a %s%v and b %s%v must be f32 of one shape", a.dtype, a.shape, b.dtype, b.shape)
	}
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	D := a.shape[len(a.shape)-1]
	rows := prod(a.shape) / D
	return newKernel(c.g, kernels.KernelRMSNorm, [3]int{rows, 1, 1}, rowBlock(D), kernels.RMSNormArgs{
		X: a.addr, B: b.addr, S: out[0].addr, Y: out[1].addr, W: w.w, Rows: int32(rows), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerGDNGates(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	a, b, aLog, dtBias := in[0], in[1], in[2], in[3]
	if err := wantRank(d, a, "a", 2); err != nil {
		return nil, err
	}
	for i, o := range []operand{aLog, dtBias} {
		if _, err := denseCode(d, o, []string{"A_log", "dt_bias"}[i]); err != nil {
			return nil, err
		}
	}
	T, Hv := a.shape[0], a.shape[1]
	return newKernel(c.g, kernels.KernelGDNGates, elementGrid(T*Hv), 256, kernels.GDNGatesArgs{
		A: a.addr, B: b.addr, G: out[0].addr, Beta: out[1].addr, ALog: aLog.w, DtBias: dtBias.w, T: int32(T), Hv: int32(Hv)})
}

func lowerConv1DSiLU(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	l, err := lowerConv1D(c, d, in, out)
	if err != nil {
		return nil, err
	}
	l.args.(*kernels.Conv1DArgs).SiLU = 1
	return l, nil
}

func lowerSliceL2Norm(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	x, y := in[0], out[0]
	axis, start, end := d.Attrs.Int("axis"), d.Attrs.Int("start"), d.Attrs.Int("end")
	D := y.shape[len(y.shape)-1]
	eps, scale := float32(d.Attrs.Float("eps")), float32(d.Attrs.Float("scale"))
	if axis == len(x.shape)-1 && start >= 0 && end <= x.shape[axis] && end > start && (end-start)%D == 0 {
		// The slice is whole heads of each row: read them in place.
		rows := prod(y.shape) / D
		l, err := newKernel(c.g, kernels.KernelL2Norm, [3]int{rows, 1, 1}, rowBlock(D), kernels.L2NormArgs{
			X: x.addr, Y: y.addr, Rows: int32(rows), D: int32(D), Eps: eps, Scale: scale,
			RowsPerOuter: int32((end - start) / D), OuterStride: int32(x.shape[axis]), Start: int32(start)})
		if err != nil {
			return nil, err
		}
		return [][]*launch{{l}}, nil
	}
	sliced := append([]int(nil), x.shape...)
	sliced[axis] = end - start
	tmp, err := c.temp(sliced...)
	if err != nil {
		return nil, err
	}
	s, err := lowerSlice(c, d, []operand{x}, []operand{tmp})
	if err != nil {
		return nil, err
	}
	tmp.shape = y.shape
	n, err := lowerL2Norm(c, d, []operand{tmp}, []operand{y})
	if err != nil {
		return nil, err
	}
	return [][]*launch{{s}, {n}}, nil
}

func lowerRMSNormRoPE(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	if _, err := denseCode(d, in[1], "weight"); err != nil {
		return nil, err
	}
	l, err := lowerRoPE(c, d, in[:1], out)
	if err != nil {
		return nil, err
	}
	a := l.args.(*kernels.RoPEArgs)
	a.W, a.Eps, a.Norm = in[1].w, float32(d.Attrs.Float("eps")), 1
	return l, nil
}

// decodeQ4 says whether x is one activation row that the fused q4 matrix-vector
// kernels can multiply by every weight in ws.
func decodeQ4(x operand, ws ...operand) bool {
	for _, w := range ws {
		if len(w.shape) != 2 || !q4Matvec(w, w.shape[1]) || prod(x.shape) != w.shape[1] || x.addr%16 != 0 {
			return false
		}
	}
	return len(ws) > 0
}

// matvecGrid covers M rows at MatvecRows per SIMD group and 4 groups per block.
func matvecGrid(M, y int) [3]int { return [3]int{ceilDiv(M, kernels.MatvecRows*4), y, 1} }

func launchStage(l *launch, err error) ([][]*launch, error) {
	if err != nil {
		return nil, err
	}
	return [][]*launch{{l}}, nil
}

// lowerMatmuls runs the projections of one x side by side: one launch for a decode row
// against q4 weights, else one matmul each in one stage.
func lowerMatmuls(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	if ws := in[1:]; len(ws) <= kernels.MaxFused && decodeQ4(in[0], ws...) {
		args := kernels.MatvecArgs{X: in[0].addr, K: int32(ws[0].shape[1]), Mode: kernels.MatvecSeparate}
		maxM := 0
		for i, w := range ws {
			args.W[i], args.Y[i], args.M[i] = w.w, out[i].addr, int32(w.shape[0])
			maxM = max(maxM, w.shape[0])
		}
		return launchStage(newKernel(c.g, kernels.KernelMatvecFusedQ4, matvecGrid(maxM, len(ws)), 128, args))
	}
	var stage []*launch
	for i, w := range in[1:] {
		l, err := matmulFor(c, d, in[0], w, out[i], nil)
		if err != nil {
			return nil, err
		}
		stage = append(stage, l)
	}
	return [][]*launch{stage}, nil
}

// lowerMatmulSwiGLU: gate and up projections side by side, then silu(gate)·up. The
// routed form (expert_matmul_swiglu) has the ids as its fourth arg.
func lowerMatmulSwiGLU(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	var ids *operand
	if len(in) == 4 {
		ids = &in[3]
	}
	x, wg, wu := in[0], in[1], in[2]
	if ids == nil && decodeQ4(x, wg, wu) && slices.Equal(wg.shape, wu.shape) {
		M := wg.shape[0]
		return launchStage(newKernel(c.g, kernels.KernelMatvecFusedQ4, matvecGrid(M, 1), 128, kernels.MatvecArgs{
			W: [kernels.MaxFused]kernels.Weight{wg.w, wu.w}, Y: [kernels.MaxFused]uint64{out[0].addr}, M: [kernels.MaxFused]int32{int32(M), int32(M)},
			X: x.addr, K: int32(wg.shape[1]), Mode: kernels.MatvecSwiGLU}))
	}
	if ids != nil && len(wg.shape) == 3 && slices.Equal(wg.shape, wu.shape) && q4Matvec(wg, wg.shape[2]) && q4Matvec(wu, wu.shape[2]) &&
		ids.shape[0]*ids.shape[1] < expertTiledMinSlots && x.addr%16 == 0 {
		E, M, K := wg.shape[0], wg.shape[1], wg.shape[2]
		args := kernels.ExpertArgs{W: wg.w, W2: wu.w, X: x.addr, Ids: ids.addr, Y: out[0].addr, T: int32(ids.shape[0]),
			TopK: int32(ids.shape[1]), E: int32(E), M: int32(M), K: int32(K)}
		if len(x.shape) == 3 {
			args.XPerSlot = 1
		}
		return launchStage(newKernel(c.g, kernels.KernelExpertMVSwiGLUQ4, matvecGrid(M, ids.shape[0]*ids.shape[1]), 128, args))
	}
	gate, err := c.temp(out[0].shape...)
	if err != nil {
		return nil, err
	}
	up, err := c.temp(out[0].shape...)
	if err != nil {
		return nil, err
	}
	lg, err := matmulFor(c, d, in[0], in[1], gate, ids)
	if err != nil {
		return nil, err
	}
	lu, err := matmulFor(c, d, in[0], in[2], up, ids)
	if err != nil {
		return nil, err
	}
	act, err := lowerBinary(kernels.BinarySwiGLU)(c, d, []operand{gate, up}, out)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{lg, lu}, {act}}, nil
}

// lowerMatmulGatedAdd: other + (x·Wᵀ)·sigmoid(gate).
func lowerMatmulGatedAdd(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	x, w, gate, other := in[0], in[1], in[2], in[3]
	if decodeQ4(x, w) && prod(gate.shape) == 1 && slices.Equal(other.shape, out[0].shape) && other.dtype == graph.F32 {
		M := w.shape[0]
		return launchStage(newKernel(c.g, kernels.KernelMatvecFusedQ4, matvecGrid(M, 1), 128, kernels.MatvecArgs{
			W: [kernels.MaxFused]kernels.Weight{w.w}, Y: [kernels.MaxFused]uint64{out[0].addr}, M: [kernels.MaxFused]int32{int32(M)},
			X: x.addr, K: int32(w.shape[1]), RowGate: gate.addr, Other: other.addr, Mode: kernels.MatvecSeparate}))
	}
	y, err := c.temp(out[0].shape...)
	if err != nil {
		return nil, err
	}
	sg, err := c.temp(gate.shape...)
	if err != nil {
		return nil, err
	}
	mm, err := matmulFor(c, d, x, w, y, nil)
	if err != nil {
		return nil, err
	}
	sig, err := lowerUnary(kernels.UnarySigmoid)(c, d, []operand{gate}, []operand{sg})
	if err != nil {
		return nil, err
	}
	mul, err := lowerBinary(kernels.BinaryMul)(c, d, []operand{y, sg}, []operand{y})
	if err != nil {
		return nil, err
	}
	add, err := lowerBinary(kernels.BinaryAdd)(c, d, []operand{other, y}, out)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{mm, sig}, {mul}, {add}}, nil
}

func lowerMatmulRouter(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	x, w := in[0], in[1]
	rows := prod(x.shape) / w.shape[1]
	logits, err := c.temp(rows, w.shape[0])
	if err != nil {
		return nil, err
	}
	mm, err := matmulFor(c, d, x, w, logits, nil)
	if err != nil {
		return nil, err
	}
	r, err := lowerRouter(c, d, []operand{logits}, out)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{mm}, {r}}, nil
}

func lowerExpertCombine(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	x, w, ids, weights := in[0], in[1], in[2], in[3]
	T, k, M := ids.shape[0], ids.shape[1], w.shape[1]
	if len(w.shape) == 3 && q4Matvec(w, w.shape[2]) && T*k < expertTiledMinSlots && x.addr%16 == 0 {
		args := kernels.ExpertArgs{W: w.w, X: x.addr, Ids: ids.addr, Y: out[0].addr, Weights: weights.addr, T: int32(T),
			TopK: int32(k), E: int32(w.shape[0]), M: int32(M), K: int32(w.shape[2])}
		if len(x.shape) == 3 {
			args.XPerSlot = 1
		}
		return launchStage(newKernel(c.g, kernels.KernelExpertMVCombineQ4, matvecGrid(M, T), 128, args))
	}
	y, err := c.temp(T, k, M)
	if err != nil {
		return nil, err
	}
	mm, err := matmulFor(c, d, x, w, y, &ids)
	if err != nil {
		return nil, err
	}
	comb, err := lowerCombine(c, d, []operand{y, weights}, out)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{mm}, {comb}}, nil
}

// lowerSigmoidGateMatmul: (a·sigmoid(g))·Wᵀ.
func lowerSigmoidGateMatmul(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	a, g, w := in[0], in[1], in[2]
	if decodeQ4(a, w) && slices.Equal(a.shape, g.shape) && g.dtype == graph.F32 && g.addr%16 == 0 {
		M := w.shape[0]
		return launchStage(newKernel(c.g, kernels.KernelMatvecFusedQ4, matvecGrid(M, 1), 128, kernels.MatvecArgs{
			W: [kernels.MaxFused]kernels.Weight{w.w}, Y: [kernels.MaxFused]uint64{out[0].addr}, M: [kernels.MaxFused]int32{int32(M)},
			X: a.addr, XGate: g.addr, K: int32(w.shape[1]), Mode: kernels.MatvecSeparate}))
	}
	sg, err := c.temp(g.shape...)
	if err != nil {
		return nil, err
	}
	ag, err := c.temp(a.shape...)
	if err != nil {
		return nil, err
	}
	sig, err := lowerUnary(kernels.UnarySigmoid)(c, d, []operand{g}, []operand{sg})
	if err != nil {
		return nil, err
	}
	mul, err := lowerBinary(kernels.BinaryMul)(c, d, []operand{a, sg}, []operand{ag})
	if err != nil {
		return nil, err
	}
	mm, err := matmulFor(c, d, ag, w, out[0], nil)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{sig}, {mul}, {mm}}, nil
}

// lowerGatedNormMatmul: gated_rms_norm per head, then the projection of the normed rows.
func lowerGatedNormMatmul(c *lowerCtx, d *plan.Dispatch, in, out []operand) ([][]*launch, error) {
	x, z, wn, w := in[0], in[1], in[2], in[3]
	n, err := c.temp(x.shape...)
	if err != nil {
		return nil, err
	}
	norm, err := lowerGatedRMSNorm(c, d, []operand{x, z, wn}, []operand{n})
	if err != nil {
		return nil, err
	}
	mm, err := matmulFor(c, d, n, w, out[0], nil)
	if err != nil {
		return nil, err
	}
	return [][]*launch{{norm}, {mm}}, nil
}
