package checkpoint

import (
	"encoding/binary"
	"slices"
	"testing"

	"pistil/graph"
	"pistil/ops"
)

func bf16Tensor(vals []float32, shape ...int) *ops.Tensor {
	t := ops.NewTensor(graph.BF16, shape...)
	for i, v := range vals {
		binary.LittleEndian.PutUint16(t.Data[2*i:], ops.F32ToBF16(v))
	}
	return t
}

func TestOnePlusW(t *testing.T) {
	w := bf16Tensor([]float32{0, 0.5, -0.25, -1}, 4)
	got, err := onePlusW(w)
	if err != nil {
		t.Fatal(err)
	}
	if got.DType != graph.F32 || !slices.Equal(got.Shape, []int{4}) {
		t.Fatalf("got %s %v, want f32 [4]", got.DType, got.Shape)
	}
	for i, want := range []float32{1, 1.5, 0.75, 0} {
		if got.F32()[i] != want {
			t.Errorf("element %d = %g, want %g", i, got.F32()[i], want)
		}
	}
	if _, err := onePlusW(&ops.Tensor{DType: graph.Q4, Shape: []int{64}}); err == nil {
		t.Error("onePlusW accepted a quantized tensor")
	}
}

func TestToF32(t *testing.T) {
	w := bf16Tensor([]float32{1.5, -2, 3.25}, 3)
	got, err := toF32(w)
	if err != nil {
		t.Fatal(err)
	}
	if got.DType != graph.F32 || got.F32()[0] != 1.5 || got.F32()[1] != -2 || got.F32()[2] != 3.25 {
		t.Fatalf("toF32 = %s %v", got.DType, got.F32())
	}
	f := ops.FromF32([]float32{7}, 1)
	if same, _ := toF32(f); same != f {
		t.Error("toF32 copied an F32 tensor")
	}
}

func TestSqueezeConv(t *testing.T) {
	// Two channels, kernel 3: both stored forms hold channel-major [C][K] memory.
	vals := []float32{1, 2, 3, 4, 5, 6}
	hf := bf16Tensor(vals, 2, 1, 3)
	got, err := squeezeConv(hf, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, []int{2, 3}) || got.Float(4) != 5 {
		t.Fatalf("HF squeeze: shape %v, [1][1] = %g", got.Shape, got.Float(4))
	}
	mlx := bf16Tensor(vals, 2, 3, 1)
	if got, err = squeezeConv(mlx, true); err != nil || !slices.Equal(got.Shape, []int{2, 3}) {
		t.Fatalf("MLX squeeze: %v %v", got, err)
	}
	if _, err := squeezeConv(mlx, false); err == nil {
		t.Error("an MLX-shaped conv was accepted as HF")
	}
	if _, err := squeezeConv(hf, true); err == nil {
		t.Error("an HF-shaped conv was accepted as MLX")
	}
}

func TestFusedHalves(t *testing.T) {
	// E=2 experts, I=2, H=3: expert e rows 0..1 are gate, rows 2..3 are up.
	E, I, H := 2, 2, 3
	vals := make([]float32, E*2*I*H)
	for i := range vals {
		vals[i] = float32(i)
	}
	fused := bf16Tensor(vals, E, 2*I, H)
	gate, err := fusedHalf(fused, false)
	if err != nil {
		t.Fatal(err)
	}
	up, err := fusedHalf(fused, true)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, H)
	for e := 0; e < E; e++ {
		for r := 0; r < I; r++ {
			gate.Row(e*I+r, H, row)
			if want := float32((e*2*I + r) * H); row[0] != want || row[2] != want+2 {
				t.Errorf("gate expert %d row %d = %v, want from %g", e, r, row, want)
			}
			up.Row(e*I+r, H, row)
			if want := float32((e*2*I + I + r) * H); row[0] != want || row[2] != want+2 {
				t.Errorf("up expert %d row %d = %v, want from %g", e, r, row, want)
			}
		}
	}
	if !slices.Equal(gate.Shape, []int{E, I, H}) {
		t.Errorf("gate shape %v", gate.Shape)
	}
}

func TestStackExperts(t *testing.T) {
	a := bf16Tensor([]float32{1, 2, 3, 4}, 2, 2)
	b := bf16Tensor([]float32{5, 6, 7, 8}, 2, 2)
	got, err := stackExperts([]*ops.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Shape, []int{2, 2, 2}) {
		t.Fatalf("shape %v", got.Shape)
	}
	for i := 0; i < 8; i++ {
		if got.Float(i) != float32(i+1) {
			t.Errorf("element %d = %g", i, got.Float(i))
		}
	}
	if _, err := stackExperts([]*ops.Tensor{a, bf16Tensor([]float32{1, 2}, 2)}); err == nil {
		t.Error("stacked experts of different shapes")
	}
}
