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

// The routed experts' prefill work items of int8ExpertRows weight rows give the bits of
// items of expertRowBlock (64): expert_qmatmul and the fused int8 SwiGLU, items that split
// an expert's rows unevenly (M = 1,344 in items of 1,024 or 320) and not at all (2,048),
// on one and three workers.
func TestExpertItemRowsSameBits(t *testing.T) {
	if int8Kernel == nil {
		t.Skip("no int8 kernel on this machine")
	}
	saved := int8ExpertRows
	defer func() { int8ExpertRows = saved }()
	rng := rand.New(rand.NewSource(31))
	const E, M, K, T, k = 6, 1344, 512, 23, 3
	wg := quantize(randTensor(rng, 0.1, E, M, K), 4, int8Group)
	wu := quantize(randTensor(rng, 0.1, E, M, K), 4, int8Group)
	x := randTensor(rng, 1, T, K)
	ids := NewTensor(graph.I32, T, k)
	for tok := 0; tok < T; tok++ {
		for j, e := range rng.Perm(E)[:k] {
			ids.I32()[tok*k+j] = int32(e)
		}
	}
	g, err := opGraph("expert_matmul_swiglu", nil, x, wg, wu, ids)
	if err != nil {
		t.Fatal(err)
	}
	v := g.Values[4]
	run := func(workers, rows int) (*Tensor, *Tensor) {
		int8ExpertRows = rows
		env := &Env{Workers: workers, Kernels: KernelsFast, Activations: ActivationsInt8}
		gate := NewTensor(graph.F32, T, k, M)
		if err := refExpertMatmul(env, v, []*Tensor{x, wg, ids}, []*Tensor{gate}); err != nil {
			t.Fatal(err)
		}
		act := NewTensor(graph.F32, T, k, M)
		if done, err := expertSwiGLUInt8(env, v, x, wg, wu, ids, act); !done || err != nil {
			t.Fatalf("expertSwiGLUInt8 = %v, %v", done, err)
		}
		return gate, act
	}
	for _, workers := range []int{1, 3} {
		wantGate, wantAct := run(workers, 0)
		for _, rows := range []int{320, 1024, 2048} {
			gate, act := run(workers, rows)
			for name, pair := range map[string][2]*Tensor{"expert_qmatmul": {gate, wantGate}, "swiglu": {act, wantAct}} {
				for i, val := range pair[0].F32() {
					if want := pair[1].F32()[i]; math.Float32bits(val) != math.Float32bits(want) {
						t.Fatalf("%s, items of %d rows, %d workers: element %d = %v, with items of 64 %v", name, rows, workers, i, val, want)
					}
				}
			}
		}
	}
}
