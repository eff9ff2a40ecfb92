package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// expert_matmul_swiglu's int8 pass (expertSwiGLUInt8) gives the unfused ops' bits: gate
// and up through expert_qmatmul, then the SwiGLU over the whole result, with every int8
// kernel, under "int8" and "int8-all", with experts of one routed row (float32 or the row
// kernel) and of several (short last blocks included), on one and three workers.
func TestExpertSwiGLUInt8MatchesUnfused(t *testing.T) {
	rng := rand.New(rand.NewSource(27))
	for _, sh := range []struct{ E, M, K, T, k int }{{8, 128, 512, 21, 3}, {40, 64, 1024, 9, 2}} {
		wg := quantize(randTensor(rng, 0.1, sh.E, sh.M, sh.K), 4, int8Group)
		wu := quantize(randTensor(rng, 0.1, sh.E, sh.M, sh.K), 4, int8Group)
		x := randTensor(rng, 1, sh.T, sh.K)
		ids := NewTensor(graph.I32, sh.T, sh.k)
		for tok := 0; tok < sh.T; tok++ {
			for j, e := range rng.Perm(sh.E)[:sh.k] {
				ids.I32()[tok*sh.k+j] = int32(e)
			}
		}
		g, err := opGraph("expert_matmul_swiglu", nil, x, wg, wu, ids)
		if err != nil {
			t.Fatal(err)
		}
		v := g.Values[4]
		forEachInt8Kernel(t, func(kernel string) {
			for _, acts := range []string{ActivationsInt8, ActivationsInt8All} {
				for _, workers := range []int{1, 3} {
					env := &Env{Workers: workers, Kernels: KernelsFast, Activations: acts}
					what := fmt.Sprintf("%v %s %s workers=%d", sh, kernel, acts, workers)
					got := NewTensor(graph.F32, sh.T, sh.k, sh.M)
					if done, err := expertSwiGLUInt8(env, v, x, wg, wu, ids, got); !done || err != nil {
						t.Fatalf("%s: expertSwiGLUInt8 = %v, %v", what, done, err)
					}
					gate, up := NewTensor(graph.F32, sh.T, sh.k, sh.M), NewTensor(graph.F32, sh.T, sh.k, sh.M)
					if err := refExpertMatmul(env, v, []*Tensor{x, wg, ids}, []*Tensor{gate}); err != nil {
						t.Fatal(err)
					}
					if err := refExpertMatmul(env, v, []*Tensor{x, wu, ids}, []*Tensor{up}); err != nil {
						t.Fatal(err)
					}
					want := gate.F32()
					siluGate(env, want, want, up.F32())
					for i, val := range got.F32() {
						if math.Float32bits(val) != math.Float32bits(want[i]) {
							t.Fatalf("%s: element %d = %v, the unfused ops' %v", what, i, val, want[i])
						}
					}
				}
			}
		})
	}
}
