package ops

import (
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

// A graph with every view kind: reshape, last_row of a symbolic-T value, select of a
// tuple, and a state update whose source must stay untouched.
func TestRunViewsAndStates(t *testing.T) {
	b := graph.NewBuilder(graph.New("views"), Default)
	x := b.Source("input", "x", graph.TensorType(graph.F32, graph.T, graph.D(4)), nil)
	st := b.Source("state", "conv", graph.TensorType(graph.F32, graph.D(1), graph.D(4)), nil)
	w := b.Source("weight", "w", graph.TensorType(graph.F32, graph.D(4), graph.D(2)), nil)
	conv := b.Op("conv1d", nil, x, st, w)
	y := b.Op("select", graph.Attrs{"index": int64(0)}, conv)
	b.G.AddOutput("conv", b.Op("select", graph.Attrs{"index": int64(1)}, conv))
	b.G.AddOutput("last", b.Op("last_row", nil, y))
	b.G.AddOutput("heads", b.Op("reshape", graph.Attrs{"shape": "[T,2,2]"}, y))
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	xs := FromF32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4)
	state := FromF32([]float32{1, 1, 1, 1}, 1, 4)
	ws := FromF32([]float32{1, 1, 1, 1, 1, 1, 1, 1}, 4, 2)
	src := map[string]*Tensor{"x": xs, "conv": state, "w": ws}
	out, err := Run(b.G, &Env{Bind: graph.Bindings{T: 3}}, func(v *graph.Value) (*Tensor, error) { return src[v.Name], nil })
	if err != nil {
		t.Fatal(err)
	}
	// y = previous row + current row, per channel.
	near(t, "last", out["last"].F32(), []float32{14, 16, 18, 20}, 0)
	if got := out["heads"].Shape; len(got) != 3 || got[0] != 3 || got[1] != 2 {
		t.Errorf("reshape shape %v", got)
	}
	near(t, "state'", out["conv"].F32(), []float32{9, 10, 11, 12}, 0)
	near(t, "source state untouched", state.F32(), []float32{1, 1, 1, 1}, 0)

	// A source of the wrong shape is named in the error.
	src["x"] = FromF32(make([]float32, 8), 2, 4)
	_, err = Run(b.G, &Env{Bind: graph.Bindings{T: 3}}, func(v *graph.Value) (*Tensor, error) { return src[v.Name], nil })
	if err == nil || !strings.Contains(err.Error(), "x is bound to a f32[2 4]") {
		t.Errorf("shape mismatch: %v", err)
	}
	src["x"] = nil
	_, err = Run(b.G, &Env{Bind: graph.Bindings{T: 3}}, func(v *graph.Value) (*Tensor, error) { return src[v.Name], nil })
	if err == nil || !strings.Contains(err.Error(), "no tensor for x") {
		t.Errorf("nil source: %v", err)
	}
}

// Reference benchmarks: the shapes of one decode token of the 35B-A3B (a 4-bit projection
// [512, 2048], and 8 routed experts of a [256, 512, 2048] stack).
func BenchmarkQMatmulDecode(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	w := quantize(randTensor(rng, 0.05, 512, 2048), 4, 64)
	x := randTensor(rng, 1, 1, 2048)
	g, _ := opGraph("qmatmul", nil, x, w)
	info, _ := Default.Info("qmatmul")
	out := []*Tensor{NewTensor(graph.F32, 1, 512)}
	env := &Env{Workers: 2}
	b.SetBytes(int64(len(w.Data) + len(w.Scales) + len(w.Biases)))
	for b.Loop() {
		if err := info.Ref(env, g.Values[2], []*Tensor{x, w}, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExpertQMatmulDecode(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	E, M, K, k := 64, 512, 2048, 8
	w := quantize(randTensor(rng, 0.05, E, M, K), 4, 64)
	x := randTensor(rng, 1, 1, K)
	ids := NewTensor(graph.I32, 1, k)
	for j := range ids.I32() {
		ids.I32()[j] = int32(j * 7)
	}
	g, _ := opGraph("expert_qmatmul", nil, x, w, ids)
	info, _ := Default.Info("expert_qmatmul")
	out := []*Tensor{NewTensor(graph.F32, 1, k, M)}
	env := &Env{Workers: 2}
	b.SetBytes(int64(k * M * K * 9 / 16))
	for b.Loop() {
		if err := info.Ref(env, g.Values[3], []*Tensor{x, w, ids}, out); err != nil {
			b.Fatal(err)
		}
	}
}
