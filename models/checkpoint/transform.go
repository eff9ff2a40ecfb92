package checkpoint

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops"
)

// Transform names a conversion from a stored tensor to the one convention the engine sees
// (contracts.md). Each is explicit and chosen from the layout and the tensor's role, never
// inferred from a shape.
type Transform string

const (
	// Identity presents the stored tensor as is (quantized tensors included).
	Identity Transform = "identity"
	// OnePlusW turns a Hugging Face zero-centred norm weight w into F32 1+w, computed in
	// float32 (model-spec §2.2, §7.2). MLX checkpoints already store 1+w.
	OnePlusW Transform = "one-plus-w"
	// SqueezeConv presents the depthwise conv weight, stored [C,1,K] (HF) or [C,K,1] (MLX),
	// as [C,K]; both have that memory order, so it is a view.
	SqueezeConv Transform = "squeeze-conv"
	// ToF32 widens A_log to F32 when stored BF16 or F16 (model-spec §7.14).
	ToF32 Transform = "to-f32"
	// FusedGateView and FusedUpView present the halves of HF's fused
	// mlp.experts.gate_up_proj [E,2I,H] (gate rows first) as [E,I,H] views using
	// ops.Tensor.Stride0; nothing is copied.
	FusedGateView Transform = "fused-gate-view"
	FusedUpView   Transform = "fused-up-view"
	// StackExperts copies per-expert mlp.experts.{e}.*_proj.weight tensors into one
	// [E, ...] stack (these come from small transformers-written checkpoints).
	StackExperts Transform = "stack-experts"
)

// onePlusW returns F32 1+w for a dense float tensor.
func onePlusW(w *ops.Tensor) (*ops.Tensor, error) {
	if err := needFloat(w); err != nil {
		return nil, err
	}
	out := ops.NewTensor(graph.F32, w.Shape...)
	dst := out.F32()
	for i := range dst {
		dst[i] = 1 + w.Float(i)
	}
	return out, nil
}

// toF32 widens a dense float tensor to F32; an F32 tensor is returned as is.
func toF32(w *ops.Tensor) (*ops.Tensor, error) {
	if err := needFloat(w); err != nil {
		return nil, err
	}
	if w.DType == graph.F32 {
		return w, nil
	}
	out := ops.NewTensor(graph.F32, w.Shape...)
	dst := out.F32()
	for i := range dst {
		dst[i] = w.Float(i)
	}
	return out, nil
}

// squeezeConv views a conv weight stored [C,1,K] (mlx=false) or [C,K,1] (mlx=true) as
// [C,K]. The expected form follows the layout; the other form is an error, because the
// conv shape is the documented sign of whether norms carry +1.
func squeezeConv(w *ops.Tensor, mlx bool) (*ops.Tensor, error) {
	s := w.Shape
	if len(s) != 3 {
		return nil, fmt.Errorf("conv1d weight has shape %v, want 3 dims", s)
	}
	c, k := s[0], s[2]
	want := "[C,1,K] (Hugging Face)"
	ok := s[1] == 1
	if mlx {
		k, want, ok = s[1], "[C,K,1] (MLX)", s[2] == 1
	}
	if !ok {
		return nil, fmt.Errorf("conv1d weight has shape %v, want %s", s, want)
	}
	v := *w
	v.Shape = []int{c, k}
	return &v, nil
}

// fusedHalf views the gate (upper=false) or up (upper=true) half of a dense fused
// gate_up_proj [E,2I,H] as [E,I,H].
func fusedHalf(w *ops.Tensor, upper bool) (*ops.Tensor, error) {
	if err := needFloat(w); err != nil {
		return nil, err
	}
	s := w.Shape
	if len(s) != 3 || s[1]%2 != 0 {
		return nil, fmt.Errorf("fused gate_up_proj has shape %v, want [E, 2I, H]", s)
	}
	e, i, h := s[0], s[1]/2, s[2]
	size := w.DType.Bits() / 8
	half := i * h * size
	v := &ops.Tensor{DType: w.DType, Shape: []int{e, i, h}, Data: w.Data, Stride0: 2 * half}
	if upper {
		v.Data = w.Data[half:]
	}
	return v, nil
}

// stackExperts copies equally shaped dense tensors into one tensor with a leading
// dimension of len(parts).
func stackExperts(parts []*ops.Tensor) (*ops.Tensor, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no expert tensors to stack")
	}
	first := parts[0]
	if err := needFloat(first); err != nil {
		return nil, err
	}
	size := len(first.Data)
	data := make([]byte, 0, size*len(parts))
	for e, p := range parts {
		if p.DType != first.DType || !slices.Equal(p.Shape, first.Shape) {
			return nil, fmt.Errorf("expert %d is %s %v but expert 0 is %s %v", e, p.DType, p.Shape, first.DType, first.Shape)
		}
		data = append(data, p.Data...)
	}
	return &ops.Tensor{DType: first.DType, Shape: append([]int{len(parts)}, first.Shape...), Data: data}, nil
}

func needFloat(w *ops.Tensor) error {
	switch w.DType {
	case graph.F32, graph.BF16, graph.F16:
		return nil
	}
	return fmt.Errorf("%s tensor where a float (bf16, f16, f32) one is required", w.DType)
}
