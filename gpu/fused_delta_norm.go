package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// gated_delta_norm (the fuse-delta-norm pass) runs as one kernel, one group per value
// head, where that group fits: a one-token step of the recurrent form, Dk rows that
// gated_delta's lanes hold (a multiple of DeltaLanes, at most DeltaMaxDk), at most
// DeltaNormMaxDv value columns (32·ceil(Dv/4) threads, at most 1,024, the largest group
// on CUDA and on Metal), an f32 gate of o's shape and a dense norm weight. Anything
// else expands into gated_delta and gated_rms_norm (expand-for-backend).

// deltaNormShape is (Hk, Hv, Dk, Dv) of a gated_delta_norm the kernel runs, or an error
// that says what it cannot run.
func deltaNormShape(attrs graph.Attrs, in []Operand) (hk, hv, dk, dv int, err error) {
	if len(in) != 8 {
		return 0, 0, 0, 0, fmt.Errorf("%d operands, want 8 (q, k, v, g, beta, S, z, norm weight)", len(in))
	}
	q, v, z, w := in[0], in[2], in[6], in[7]
	if len(q.Shape) != 3 || len(v.Shape) != 3 || len(w.Shape) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("q %v, v %v, norm weight %v: want [T, Hk, Dk], [T, Hv, Dv], [Dv]", q.Shape, v.Shape, w.Shape)
	}
	if v.Shape[0] != 1 {
		return 0, 0, 0, 0, fmt.Errorf("%d tokens; the kernel is a decode kernel (fuse-delta-norm fuses one-token steps)", v.Shape[0])
	}
	if f := attrs.String("form"); f != "" && f != "recurrent" {
		return 0, 0, 0, 0, fmt.Errorf("form %q has no GPU kernel (only recurrent)", f)
	}
	hk, dk, hv, dv = q.Shape[1], q.Shape[2], v.Shape[1], v.Shape[2]
	switch {
	case dk%kernels.DeltaLanes != 0 || dk < kernels.DeltaLanes || dk > kernels.DeltaMaxDk:
		return 0, 0, 0, 0, fmt.Errorf("key dim %d must be a multiple of %d and at most %d", dk, kernels.DeltaLanes, kernels.DeltaMaxDk)
	case dv < 1 || dv > kernels.DeltaNormMaxDv:
		return 0, 0, 0, 0, fmt.Errorf("value dim %d outside [1, %d] (a group of 32·ceil(Dv/4) threads)", dv, kernels.DeltaNormMaxDv)
	case hk < 1 || hv%hk != 0:
		return 0, 0, 0, 0, fmt.Errorf("%d value heads over %d key heads", hv, hk)
	case z.DType != graph.F32 || !slices.Equal(z.Shape, v.Shape):
		return 0, 0, 0, 0, fmt.Errorf("gate z %s%v is not f32 of v's shape %v", z.DType, z.Shape, v.Shape)
	case w.Shape[0] != dv:
		return 0, 0, 0, 0, fmt.Errorf("norm weight %v is not [Dv = %d]", w.Shape, dv)
	}
	switch w.DType {
	case graph.F32, graph.BF16, graph.F16:
	default:
		return 0, 0, 0, 0, fmt.Errorf("norm weight is %s; the kernel reads f32, bf16 or f16", w.DType)
	}
	return hk, hv, dk, dv, nil
}

func supportsGatedDeltaNorm(attrs graph.Attrs, in, _ []Operand) bool {
	_, _, _, _, err := deltaNormShape(attrs, in)
	return err == nil
}

func lowerGatedDeltaNorm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	hk, hv, dk, dv, err := deltaNormShape(d.Attrs, in)
	if err != nil {
		return nil, fmt.Errorf("gated_delta_norm: %w; the plan should have expanded it", err)
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("gated_delta_norm: %d results, want 2 (the normed output, S')", len(out))
	}
	if _, err := denseCode(d, in[7], "norm weight"); err != nil {
		return nil, err
	}
	return newKernel(kernels.KernelGatedDeltaNorm, [3]int{hv, 1, 1}, kernels.SIMDWidth*ceilDiv(dv, 32/kernels.DeltaLanes), kernels.GatedDeltaNormArgs{
		Delta: kernels.GatedDeltaArgs{Q: in[0].Addr, K: in[1].Addr, V: in[2].Addr, G: in[3].Addr, Beta: in[4].Addr, S: out[1].Addr,
			T: 1, Hk: int32(hk), Hv: int32(hv), Dk: int32(dk), Dv: int32(dv)},
		Z: in[6].Addr, Y: out[0].Addr, W: in[7].W, Eps: float32(d.Attrs.Float("eps"))})
}
