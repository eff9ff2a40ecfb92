package ops

import (
	"math/rand"
	"testing"

	"pistil/graph"
)

// Fused references against the unfused ops they replace, at decode shapes of the 35B-A3B
// (one token, hidden 2048, q4 group 64): the fused CPU kernel must be no slower. The
// unfused side runs each op's reference over preallocated intermediates, as the CPU
// backend does over its arena.
//
//	go test ./ops -run X -bench Fused

type benchStep struct {
	op    string
	attrs graph.Attrs
	in    []*Tensor
	out   []*Tensor
}

func (s benchStep) run(b *testing.B, env *Env) {
	info, _ := Default.Info(s.op)
	v := &graph.Value{Op: s.op, Attrs: s.attrs}
	if err := info.Ref(env, v, s.in, s.out); err != nil {
		b.Fatal(err)
	}
}

func benchSteps(b *testing.B, fused []benchStep, unfused []benchStep) {
	env := &Env{Workers: 2}
	for _, c := range []struct {
		name  string
		steps []benchStep
	}{{"fused", fused}, {"unfused", unfused}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				for _, s := range c.steps {
					s.run(b, env)
				}
			}
		})
	}
}

func BenchmarkFusedSharedSwiGLU(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	x := randTensor(rng, 1, 1, 2048)
	wg, wu := quantize(randTensor(rng, 0.1, 512, 2048), 4, 64), quantize(randTensor(rng, 0.1, 512, 2048), 4, 64)
	g, u, y := NewTensor(graph.F32, 1, 512), NewTensor(graph.F32, 1, 512), NewTensor(graph.F32, 1, 512)
	benchSteps(b,
		[]benchStep{{op: "matmul_swiglu", in: []*Tensor{x, wg, wu}, out: []*Tensor{y}}},
		[]benchStep{
			{op: "qmatmul", in: []*Tensor{x, wg}, out: []*Tensor{g}},
			{op: "qmatmul", in: []*Tensor{x, wu}, out: []*Tensor{u}},
			{op: "swiglu", in: []*Tensor{g, u}, out: []*Tensor{y}},
		})
}

func BenchmarkFusedGDNProjections(b *testing.B) {
	rng := rand.New(rand.NewSource(2))
	x := randTensor(rng, 1, 1, 2048)
	rows := []int{8192, 4096, 32, 32}
	var ws, outs []*Tensor
	var unfused []benchStep
	for _, m := range rows {
		w := quantize(randTensor(rng, 0.1, m, 2048), 4, 64)
		y := NewTensor(graph.F32, 1, m)
		ws, outs = append(ws, w), append(outs, y)
		unfused = append(unfused, benchStep{op: "qmatmul", in: []*Tensor{x, w}, out: []*Tensor{y}})
	}
	benchSteps(b, []benchStep{{op: "matmuls", in: append([]*Tensor{x}, ws...), out: outs}}, unfused)
}

func BenchmarkFusedRoutedExperts(b *testing.B) {
	rng := rand.New(rand.NewSource(3))
	const E, k = 16, 8 // a 16-expert stack: the 8 routed experts are what is read
	x := randTensor(rng, 1, 1, 2048)
	wg := quantize(randTensor(rng, 0.1, E, 512, 2048), 4, 64)
	wu := quantize(randTensor(rng, 0.1, E, 512, 2048), 4, 64)
	wd := quantize(randTensor(rng, 0.1, E, 2048, 512), 4, 64)
	ids := NewTensor(graph.I32, 1, k)
	for j := range ids.I32() {
		ids.I32()[j] = int32(2 * j)
	}
	weights := FromF32(randF32(rng, k, 0.1), 1, k)
	g, u, act := NewTensor(graph.F32, 1, k, 512), NewTensor(graph.F32, 1, k, 512), NewTensor(graph.F32, 1, k, 512)
	down, out := NewTensor(graph.F32, 1, k, 2048), NewTensor(graph.F32, 1, 2048)
	benchSteps(b,
		[]benchStep{
			{op: "expert_matmul_swiglu", in: []*Tensor{x, wg, wu, ids}, out: []*Tensor{act}},
			{op: "expert_matmul_combine", in: []*Tensor{act, wd, ids, weights}, out: []*Tensor{out}},
		},
		[]benchStep{
			{op: "expert_qmatmul", in: []*Tensor{x, wg, ids}, out: []*Tensor{g}},
			{op: "expert_qmatmul", in: []*Tensor{x, wu, ids}, out: []*Tensor{u}},
			{op: "swiglu", in: []*Tensor{g, u}, out: []*Tensor{act}},
			{op: "expert_qmatmul", in: []*Tensor{act, wd, ids}, out: []*Tensor{down}},
			{op: "moe_combine", in: []*Tensor{down, weights}, out: []*Tensor{out}},
		})
}

func BenchmarkFusedGDNOutProj(b *testing.B) {
	rng := rand.New(rand.NewSource(4))
	x, z := randTensor(rng, 1, 1, 32, 128), randTensor(rng, 1, 1, 32, 128)
	wn := toBF16(randTensor(rng, 1, 128))
	w := quantize(randTensor(rng, 0.1, 2048, 4096), 4, 64)
	normed, y := NewTensor(graph.F32, 1, 4096), NewTensor(graph.F32, 1, 2048)
	eps := graph.Attrs{"eps": 1e-6}
	benchSteps(b,
		[]benchStep{{op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,4096]"}, in: []*Tensor{x, z, wn, w}, out: []*Tensor{y}}},
		[]benchStep{
			{op: "gated_rms_norm", attrs: eps, in: []*Tensor{x, z, wn}, out: []*Tensor{{DType: graph.F32, Shape: []int{1, 32, 128}, Data: normed.Data}}},
			{op: "qmatmul", in: []*Tensor{normed, w}, out: []*Tensor{y}},
		})
}
