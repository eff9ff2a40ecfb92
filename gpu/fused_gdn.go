package gpu

import (
	"fmt"

	"pistil/ops/kernels"
	"pistil/plan"
)

// The fused Gated DeltaNet decode step (the fuse-gdn-prologue pass): gated_delta_step, one
// kernel on gated_delta's grid for one token, and conv_state_shift, the conv state's update
// after it. gated_delta_step has no expansion (ops/fused_gdn.go says why), so it is in the
// table of ops that are always one kernel: the pass makes it only for one-token steps, and
// the lowering refuses any other.

func lowerGatedDeltaStep(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if len(in[0].Shape) != 2 || in[0].Shape[0] != 1 {
		return nil, fmt.Errorf("gated_delta_step: x %v is not one token; the kernel is a decode kernel (fuse-gdn-prologue fuses only decode steps)", in[0].Shape)
	}
	if f := d.Attrs.String("form"); f != "" && f != "recurrent" {
		return nil, fmt.Errorf("gated_delta_step: form %q has no GPU kernel (only recurrent)", f)
	}
	x, convState, convW, S := in[0], in[3], in[4], in[7]
	if err := wantRank(d, convW, "conv weight", 2); err != nil {
		return nil, err
	}
	if err := wantRank(d, S, "S", 3); err != nil {
		return nil, err
	}
	Ch, K := x.Shape[1], convW.Shape[1]
	Hv, Dk, Dv, Hk := S.Shape[0], S.Shape[1], S.Shape[2], d.Attrs.Int("key_heads")
	if K < 1 || K > kernels.ConvMaxK {
		return nil, fmt.Errorf("gated_delta_step: conv kernel size %d outside [1, %d]", K, kernels.ConvMaxK)
	}
	if Dk%kernels.DeltaLanes != 0 || Dk > kernels.DeltaMaxDk {
		return nil, fmt.Errorf("gated_delta_step: key dim %d must be a multiple of %d and at most %d", Dk, kernels.DeltaLanes, kernels.DeltaMaxDk)
	}
	if Hk < 1 || Hv%Hk != 0 || Hv > 65535 {
		return nil, fmt.Errorf("gated_delta_step: %d value heads over %d key heads", Hv, Hk)
	}
	dt, err := stateCode(d, convState)
	if err != nil {
		return nil, err
	}
	for i, name := range map[int]string{5: "A_log", 6: "dt_bias"} {
		if _, err := denseCode(d, in[i], name); err != nil {
			return nil, err
		}
	}
	return newKernel(kernels.KernelGatedDeltaStep, [3]int{ceilDiv(Dv, 32/kernels.DeltaLanes), Hv, 1}, 32, kernels.GatedDeltaStepArgs{
		X: x.Addr, A: in[1].Addr, B: in[2].Addr, ConvState: convState.Addr, S: out[1].Addr, O: out[0].Addr,
		ConvW: convW.W, ALog: in[5].W, DtBias: in[6].W,
		Hk: int32(Hk), Hv: int32(Hv), Dk: int32(Dk), Dv: int32(Dv), K: int32(K), Ch: int32(Ch),
		QStart: int32(d.Attrs.Int("q_start")), KStart: int32(d.Attrs.Int("k_start")), VStart: int32(d.Attrs.Int("v_start")),
		StateDType: dt,
		QEps:       float32(d.Attrs.Float("q_eps")), QScale: float32(d.Attrs.Float("q_scale")),
		KEps: float32(d.Attrs.Float("k_eps")), KScale: float32(d.Attrs.Float("k_scale"))})
}

func lowerConvStateShift(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, st := in[0], out[0]
	if err := wantRank(d, x, "x", 2); err != nil {
		return nil, err
	}
	if err := wantRank(d, st, "state", 2); err != nil {
		return nil, err
	}
	T, Ch, rows := x.Shape[0], x.Shape[1], st.Shape[0]
	if rows > kernels.ConvMaxK-1 {
		return nil, fmt.Errorf("conv_state_shift: %d state rows exceed %d", rows, kernels.ConvMaxK-1)
	}
	dt, err := stateCode(d, st)
	if err != nil {
		return nil, err
	}
	return newKernel(kernels.KernelConvStateShift, [3]int{ceilDiv(Ch, 128), 1, 1}, 128, kernels.ConvShiftArgs{
		X: x.Addr, State: st.Addr, T: int32(T), Ch: int32(Ch), Rows: int32(rows), StateDType: dt})
}
