package ops

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"pistil/graph"
)

// gated_delta_norm computes what the model declares, gated_delta then gated_rms_norm on
// its output, to the bit: over one-token steps (what the pass fuses) and a longer one
// (the reference is not limited to decode), GQA and Hk = Hv, a value dim that is not a
// multiple of 4, f32 and bf16 norm weights, both forms of the rule, with the fast and
// the reference kernels.
func TestGatedDeltaNormIsDeltaThenGatedNorm(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	shapes := []struct{ T, Hk, Hv, Dk, Dv int }{
		{1, 2, 4, 32, 24}, {1, 16, 32, 128, 128}, {1, 3, 3, 64, 7}, {5, 2, 4, 16, 12},
	}
	for _, s := range shapes {
		for _, form := range []string{"recurrent", "chunked"} {
			for _, kernels := range []string{KernelsFast, KernelsReference} {
				name := fmt.Sprintf("T%d Hk%d Hv%d Dk%d Dv%d %s kernels %s", s.T, s.Hk, s.Hv, s.Dk, s.Dv, form, kernels)
				t.Run(name, func(t *testing.T) {
					attrs := graph.Attrs{"form": form, "chunk": int64(2), "eps": 1e-6}
					w := randTensor(rng, 1, s.Dv)
					if s.Dv%2 == 0 {
						w = toBF16(w)
					}
					args := []*Tensor{
						randTensor(rng, 0.3, s.T, s.Hk, s.Dk), randTensor(rng, 0.3, s.T, s.Hk, s.Dk), randTensor(rng, 1, s.T, s.Hv, s.Dv),
						randTensor(rng, 0.1, s.T, s.Hv), FromF32(randF32(rng, s.T*s.Hv, 1), s.T, s.Hv), randTensor(rng, 0.3, s.Hv, s.Dk, s.Dv),
						randTensor(rng, 2, s.T, s.Hv, s.Dv), w,
					}
					fused := runWith(t, deltaNormGraph(t, true, attrs, args), kernels, s.T, args)
					unfused := runWith(t, deltaNormGraph(t, false, attrs, args), kernels, s.T, args)
					for i, what := range []string{"normed output", "state"} {
						if !bytes.Equal(fused[i].Data, unfused[i].Data) {
							near(t, what, fused[i].F32(), unfused[i].F32(), 0)
							t.Fatalf("%s: bytes differ from gated_delta → gated_rms_norm", what)
						}
					}
				})
			}
		}
	}
}

// The norm is over each value head: a head of zeros stays zero (eps keeps it finite), and
// a head's values scaled (from a zero state, o is linear in v) normalise to the same
// output, whatever the other head holds. A tiny eps, so that it does not tell the scales apart.
func TestGatedDeltaNormIsPerHead(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	attrs := graph.Attrs{"form": "recurrent", "chunk": int64(64), "eps": 1e-20}
	q, k := randTensor(rng, 0.3, 1, 1, 8), randTensor(rng, 0.3, 1, 1, 8)
	v, g, beta := randTensor(rng, 1, 1, 2, 4), randTensor(rng, 0.1, 1, 2), FromF32([]float32{0.5, 0.5}, 1, 2)
	S, z, w := NewTensor(graph.F32, 2, 8, 4), randTensor(rng, 1, 1, 2, 4), randTensor(rng, 1, 4)
	for i := range 4 {
		v.F32()[i] = 0 // head 0: v = 0 from a zero state, so o = 0
	}
	args := []*Tensor{q, k, v, g, beta, S, z, w}
	base := runWith(t, deltaNormGraph(t, true, attrs, args), KernelsFast, 1, args)[0].F32()
	for i := range 4 {
		if base[i] != 0 {
			t.Fatalf("head of zeros normed to %v", base[:4])
		}
	}
	v2 := FromF32(append([]float32(nil), v.F32()...), 1, 2, 4)
	for i := 4; i < 8; i++ {
		v2.F32()[i] *= 3
	}
	scaled := runWith(t, deltaNormGraph(t, true, attrs, args), KernelsFast, 1, []*Tensor{q, k, v2, g, beta, S, z, w})[0].F32()
	near(t, "head 1 scaled by 3 (the norm undoes it)", scaled[4:], base[4:], 1e-5)
}

// deltaNormGraph declares gated_delta_norm over sources a0..a7, or the model's unfused
// gated_delta → select → gated_rms_norm; outputs out0 (the normed output) and out1 (S').
func deltaNormGraph(t *testing.T, fused bool, attrs graph.Attrs, args []*Tensor) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder(graph.New("delta_norm"), Default)
	in := make([]*graph.Value, len(args))
	for i, a := range args {
		in[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
	}
	var y, s *graph.Value
	if fused {
		d := b.Op("gated_delta_norm", attrs, in...)
		y, s = b.Op("select", graph.Attrs{"index": int64(0)}, d), b.Op("select", graph.Attrs{"index": int64(1)}, d)
	} else {
		d := b.Op("gated_delta", graph.Attrs{"form": attrs["form"], "chunk": attrs["chunk"]}, in[:6]...)
		o := b.Op("select", graph.Attrs{"index": int64(0)}, d)
		y = b.Op("gated_rms_norm", graph.Attrs{"eps": attrs["eps"]}, o, in[6], in[7])
		s = b.Op("select", graph.Attrs{"index": int64(1)}, d)
	}
	b.G.AddOutput("out0", y)
	b.G.AddOutput("out1", s)
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	return b.G
}

// runWith runs g on copies of args (the state is updated in place) with the kernel set.
func runWith(t *testing.T, g *graph.Graph, kernels string, T int, args []*Tensor) []*Tensor {
	t.Helper()
	res, err := Run(g, &Env{Bind: graph.Bindings{T: T}, Workers: 3, Kernels: kernels}, func(v *graph.Value) (*Tensor, error) {
		var i int
		fmt.Sscanf(v.Name, "a%d", &i)
		c := *args[i]
		c.Data = append([]byte(nil), args[i].Data...)
		return &c, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return []*Tensor{res["out0"], res["out1"]}
}
