package ops

import (
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

func TestMatmulByHand(t *testing.T) {
	x := FromF32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	w := FromF32([]float32{1, 0, 0, 0, 1, -1}, 2, 3)
	want := []float32{1, -1, 4, -1}
	near(t, "f32", runOp(t, "matmul", nil, graph.Bindings{}, x, w)[0].F32(), want, 0)
	near(t, "bf16", runOp(t, "matmul", nil, graph.Bindings{}, x, toBF16(w))[0].F32(), want, 0)
	// Leading dims are flattened: x [1,2,3] gives y [1,2,2].
	x3 := FromF32(x.F32(), 1, 2, 3)
	y := runOp(t, "matmul", nil, graph.Bindings{}, x3, w)[0]
	if len(y.Shape) != 3 || y.Shape[2] != 2 {
		t.Fatalf("shape %v", y.Shape)
	}
	near(t, "3-d", y.F32(), want, 0)
}

func TestMatmulLarge(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	x, w := randTensor(rng, 1, 5, 67), randTensor(rng, 1, 33, 67)
	want := naiveMatmul(x.F32(), w.F32(), 67)
	near(t, "f32", runOp(t, "matmul", nil, graph.Bindings{}, x, w)[0].F32(), want, 1e-5)
}

// The fast quantized row decoder and the group-sum dot agree with Tensor.Row, for both
// bit widths, two group sizes and a strided (non-contiguous) stack.
func TestQuantRowsMatchTensorRow(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64} {
			q := quantize(randTensor(rng, 1, 6, 128), bits, group)
			w, err := newWeightRows(q)
			if err != nil {
				t.Fatal(err)
			}
			ref := rowsOf(q)
			x := randF32(rng, 128, 1)
			xsum := groupSums(x, group, nil)
			row := make([]float32, 128)
			for r := 0; r < 6; r++ {
				w.decode(r, row)
				near(t, "decode", row, ref[r*128:(r+1)*128], 0)
				got := w.dotQuant(r, x, xsum)
				near(t, "dotQuant", []float32{got}, []float32{dot(x, ref[r*128:(r+1)*128])}, 1e-5)
			}
		}
	}
	// A [E, 2I, K] stack viewed as its upper half [E, I, K] through Stride0.
	full := quantize(randTensor(rng, 1, 3, 8, 64), 4, 64)
	half := &Tensor{DType: graph.Q4, Shape: []int{3, 4, 64}, Group: 64, Stride0: 8 * 64 / 2, Stride0Groups: 8,
		Data: full.Data[4*64/2:], Scales: full.Scales[4*2:], Biases: full.Biases[4*2:]}
	w, err := newWeightRows(half)
	if err != nil {
		t.Fatal(err)
	}
	fullRows, halfRows := rowsOf(full), rowsOf(half)
	row := make([]float32, 64)
	for e := 0; e < 3; e++ {
		for r := 0; r < 4; r++ {
			w.decode(e*4+r, row)
			near(t, "strided decode", row, halfRows[(e*4+r)*64:(e*4+r+1)*64], 0)
			near(t, "strided = upper half", row, fullRows[(e*8+4+r)*64:(e*8+5+r)*64], 0)
		}
	}
}

// qmatmul equals its expansion matmul(x, dequant(w)) on both paths: the group-sum dot
// (few rows) and the decoded-row reuse (many rows).
func TestQMatmulEqualsExpand(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, bits := range []int{4, 8} {
		w := quantize(randTensor(rng, 0.1, 40, 128), bits, 64)
		for _, P := range []int{1, 2, quantDotMaxRows + 2} {
			x := randTensor(rng, 1, P, 128)
			fused := runOp(t, "qmatmul", nil, graph.Bindings{}, x, w)[0].F32()
			expanded := runExpanded(t, "qmatmul", nil, graph.Bindings{}, x, w)[0].F32()
			near(t, "qmatmul vs expand", fused, expanded, 1e-5)
			near(t, "qmatmul vs naive", fused, naiveMatmul(x.F32(), rowsOf(w), 128), 1e-5)
		}
	}
}

func TestEmbed(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	table := randTensor(rng, 1, 10, 64)
	ids := NewTensor(graph.I32, 3)
	copy(ids.I32(), []int32{7, 0, 7})
	for name, tb := range map[string]*Tensor{"f32": table, "bf16": toBF16(table), "q4": quantize(table, 4, 64)} {
		ref := rowsOf(tb)
		got := runOp(t, "embed", nil, graph.Bindings{}, tb, ids)[0].F32()
		want := append(append(append([]float32(nil), ref[7*64:8*64]...), ref[:64]...), ref[7*64:8*64]...)
		near(t, name, got, want, 0)
	}
	copy(ids.I32(), []int32{1, 10, 2})
	g, _ := opGraph("embed", nil, table, ids)
	_, err := Run(g, &Env{}, func(v *graph.Value) (*Tensor, error) {
		if v.Name == "a0" {
			return table, nil
		}
		return ids, nil
	})
	if err == nil || !strings.Contains(err.Error(), "token id 10") {
		t.Fatalf("out-of-range id: %v", err)
	}
}

func TestDequant(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	q := quantize(randTensor(rng, 1, 2, 3, 64), 4, 64)
	near(t, "dequant", runOp(t, "dequant", nil, graph.Bindings{}, q)[0].F32(), rowsOf(q), 0)
}

func TestMatmulInferErrors(t *testing.T) {
	x := NewTensor(graph.F32, 2, 3)
	cases := []struct {
		op   string
		args []*Tensor
		want string
	}{
		{"matmul", []*Tensor{x, NewTensor(graph.F32, 4, 5)}, "inner dimension"},
		{"matmul", []*Tensor{x, quantize(NewTensor(graph.F32, 4, 64), 4, 64)}, "want f32 or bf16 or f16"},
		{"qmatmul", []*Tensor{x, NewTensor(graph.BF16, 4, 3)}, "want q4 or q8"},
		{"matmul", []*Tensor{NewTensor(graph.I32, 2, 3), NewTensor(graph.F32, 4, 3)}, "arg 0 (x) has dtype i32"},
		{"embed", []*Tensor{NewTensor(graph.F32, 4, 3), NewTensor(graph.F32, 2)}, "arg 1 (ids)"},
	}
	for _, c := range cases {
		if _, err := opGraph(c.op, nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.op, err, c.want)
		}
	}
}

func TestCosts(t *testing.T) {
	b := graph.NewBuilder(graph.New("cost"), Default)
	table := b.Source("weight", "embed_tokens", graph.QuantType(graph.Q4, 64, graph.D(1000), graph.D(128)), nil)
	ids := b.Source("input", "tokens", graph.TensorType(graph.I32, graph.T), nil)
	emb := b.Op("embed", nil, table, ids)
	w := b.Source("weight", "w", graph.QuantType(graph.Q4, 64, graph.D(16), graph.D(32), graph.D(128)), nil)
	route := b.Source("input", "ids", graph.TensorType(graph.I32, graph.T, graph.D(4)), nil)
	ex := b.Op("expert_qmatmul", nil, emb, w, route)
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	rowBytes := int64(128/2 + 2*2*2) // 64 B of codes, 2 groups of bf16 scale+bias
	c := Default.byName["embed"].Cost(emb, graph.Bindings{T: 3})
	if c.BytesRead != 3*4+3*rowBytes || c.BytesWritten != 3*128*4 {
		t.Errorf("embed cost %+v, want %d read", c, 3*4+3*rowBytes)
	}
	expertBytes := 32 * rowBytes
	for _, tc := range []struct{ T, experts int64 }{{1, 4}, {2, 8}, {10, 16}} {
		c := Default.byName["expert_qmatmul"].Cost(ex, graph.Bindings{T: int(tc.T)})
		want := tc.T*128*4 + tc.T*4*4 + tc.experts*expertBytes
		if c.BytesRead != want || c.Flops != 2*tc.T*4*32*128 {
			t.Errorf("T=%d: expert cost %+v, want %d read", tc.T, c, want)
		}
	}
}
