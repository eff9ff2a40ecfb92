package ops

import (
	"fmt"
	"math/rand"
	"testing"

	"pistil/graph"
)

// BenchmarkMoEDecodeStream is one decode step's MoE block of the 35B-A3B under
// activations = "int8-all", from memory: expert_matmul_swiglu_shared and
// expert_matmul_combine_shared over a stack of 256 experts [512, 2048] gate and up and
// [2048, 512] down (453 MB, 14 times the L3 cache) and a shared expert, 8 experts drawn at
// random each step as a synthetic checkpoint routes them, on two workers. MB/s is weight
// bytes read (the 8 experts' and the shared one's gate, up and down) per second.
//
// The shared expert (1.77 MB, 11% of the bytes) is one set of weights read every step,
// so after the first step it comes from the caches; in the model each of the 40 layers
// has its own, read once a token, from memory. The /cold-shared case reads the shared
// expert of a different layer each step (40 sets, 71 MB, past the caches), as the
// model does.
//
//	go test ./ops/ -run X -bench MoEDecodeStream
func BenchmarkMoEDecodeStream(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const E, M, K, k = 256, 512, 2048, 8
	wg, wu := randQuantized(rng, 4, 64, E, M, K), randQuantized(rng, 4, 64, E, M, K)
	wd := randQuantized(rng, 4, 64, E, K, M)
	const layers = 40
	var sgs, sus, sds [layers]*Tensor
	for l := range layers {
		sgs[l], sus[l], sds[l] = randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, K, M)
	}
	sg, su, sd := sgs[0], sus[0], sds[0]
	x := randTensor(rng, 1, 1, K)
	ids := NewTensor(graph.I32, 1, k)
	weights := randTensor(rng, 0.1, 1, k)
	gate := randTensor(rng, 1, 1, 1)
	g1, err := opGraph("expert_matmul_swiglu_shared", nil, x, wg, wu, ids, sg, su)
	if err != nil {
		b.Fatal(err)
	}
	routed, shared := NewTensor(graph.F32, 1, k, M), NewTensor(graph.F32, 1, M)
	g2, err := opGraph("expert_matmul_combine_shared", nil, routed, wd, ids, weights, shared, sd, gate)
	if err != nil {
		b.Fatal(err)
	}
	swiglu, _ := Default.Info("expert_matmul_swiglu_shared")
	combine, _ := Default.Info("expert_matmul_combine_shared")
	v1, v2 := g1.Values[6], g2.Values[7]
	if v1.Op != "expert_matmul_swiglu_shared" || v2.Op != "expert_matmul_combine_shared" {
		b.Fatalf("values %s, %s", v1.Op, v2.Op)
	}
	y := NewTensor(graph.F32, 1, K)
	per := func(t *Tensor) int { return (len(t.Data) + len(t.Scales) + len(t.Biases)) / E }
	defer SetWorkerPool(WorkerPool())
	for _, c := range []struct {
		workers    int
		pool, cold bool
	}{{1, false, false}, {2, false, false}, {2, true, false}, {2, true, true}} {
		env := &Env{Workers: c.workers, Kernels: KernelsFast, Activations: ActivationsInt8All}
		name := fmt.Sprintf("workers=%d", c.workers)
		if c.pool {
			name += "/pool"
		}
		if c.cold {
			name += "/cold-shared"
		}
		b.Run(name, func(b *testing.B) {
			SetWorkerPool(c.pool)
			b.SetBytes(int64(k*(per(wg)+per(wu)+per(wd)) + len(sg.Data)*3*9/8))
			step := 0
			for b.Loop() {
				for j, e := range rng.Perm(E)[:k] {
					ids.I32()[j] = int32(e)
				}
				if c.cold {
					sg, su, sd = sgs[step%layers], sus[step%layers], sds[step%layers]
					step++
				}
				if err := swiglu.Ref(env, v1, []*Tensor{x, wg, wu, ids, sg, su}, []*Tensor{routed, shared}); err != nil {
					b.Fatal(err)
				}
				if err := combine.Ref(env, v2, []*Tensor{routed, wd, ids, weights, shared, sd, gate}, []*Tensor{y}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
