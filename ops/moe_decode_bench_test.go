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
//	go test ./ops/ -run X -bench MoEDecodeStream
func BenchmarkMoEDecodeStream(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const E, M, K, k = 256, 512, 2048, 8
	wg, wu := randQuantized(rng, 4, 64, E, M, K), randQuantized(rng, 4, 64, E, M, K)
	wd := randQuantized(rng, 4, 64, E, K, M)
	sg, su, sd := randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, K, M)
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
		workers int
		pool    bool
	}{{1, false}, {2, false}, {2, true}} {
		env := &Env{Workers: c.workers, Kernels: KernelsFast, Activations: ActivationsInt8All}
		name := fmt.Sprintf("workers=%d", c.workers)
		if c.pool {
			name += "/pool"
		}
		b.Run(name, func(b *testing.B) {
			SetWorkerPool(c.pool)
			b.SetBytes(int64(k*(per(wg)+per(wu)+per(wd)) + len(sg.Data)*3*9/8))
			for b.Loop() {
				for j, e := range rng.Perm(E)[:k] {
					ids.I32()[j] = int32(e)
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
