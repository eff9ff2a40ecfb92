package ops

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

// Every fused op must compute what its expansion computes, on random inputs, with float
// and quantized weights; its cost must count the fused kernel's traffic (the fused op's
// own args and results, no intermediate).

// runFusedAndExpanded runs op and ExpandElems(op) over the same sources.
func runFusedAndExpanded(t *testing.T, op string, attrs graph.Attrs, bind graph.Bindings, args ...*Tensor) (fused, expanded []*Tensor) {
	t.Helper()
	fused = runOp(t, op, attrs, bind, args...)
	return fused, runGraph(t, expansionGraph(t, op, attrs, args...), bind, args...)
}

// expansionGraph is the graph of ExpandElems(op) over sources shaped as args, every
// element of the expansion an output.
func expansionGraph(t *testing.T, op string, attrs graph.Attrs, args ...*Tensor) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder(graph.New(op), Default)
	srcs := make([]*graph.Value, len(args))
	for i, a := range args {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
	}
	elems, err := ExpandElems(b, b.Op(op, attrs, srcs...))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range elems {
		b.G.AddOutput(fmt.Sprintf("out%d", i), e)
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	return b.G
}

func sameResults(t *testing.T, op string, fused, expanded []*Tensor) {
	t.Helper()
	if len(fused) != len(expanded) {
		t.Fatalf("%s: %d results, expansion %d", op, len(fused), len(expanded))
	}
	for i := range fused {
		if fused[i].DType == graph.BF16 {
			// A bf16 state (a cache the fused op writes): the same f32 arithmetic rounded once.
			if !bytes.Equal(fused[i].Data, expanded[i].Data) {
				t.Fatalf("%s result %d: bf16 bytes differ from the expansion's", op, i)
			}
			continue
		}
		if fused[i].DType == graph.I32 {
			for j, id := range fused[i].I32() {
				if id != expanded[i].I32()[j] {
					t.Fatalf("%s result %d [%d] = %d, expansion %d", op, i, j, id, expanded[i].I32()[j])
				}
			}
			continue
		}
		near(t, fmt.Sprintf("%s result %d", op, i), fused[i].F32(), expanded[i].F32(), 1e-6)
	}
}

// weightKinds gives a random [rows, cols] weight as f32, bf16 and q4 (group 32).
func weightKinds(rng *rand.Rand, shape ...int) map[string]*Tensor {
	w := randTensor(rng, 0.2, shape...)
	return map[string]*Tensor{"f32": w, "bf16": toBF16(w), "q4": quantize(w, 4, 32), "q8": quantize(w, 8, 32)}
}

func TestFusedMatmulsMatchExpansion(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	for _, P := range []int{1, 5} {
		x := randTensor(rng, 1, P, 64)
		gate := randTensor(rng, 1, P, 1)
		other := randTensor(rng, 1, P, 24)
		for kind, w1 := range weightKinds(rng, 24, 64) {
			w2 := weightKinds(rng, 8, 64)[kind]
			w3 := weightKinds(rng, 24, 64)[kind]
			name := fmt.Sprintf("%s P=%d", kind, P)
			f, e := runFusedAndExpanded(t, "matmuls", nil, graph.Bindings{}, x, w1, w2, w3)
			sameResults(t, "matmuls "+name, f, e)
			f, e = runFusedAndExpanded(t, "matmul_swiglu", nil, graph.Bindings{}, x, w1, w3)
			sameResults(t, "matmul_swiglu "+name, f, e)
			f, e = runFusedAndExpanded(t, "matmul_gated_add", nil, graph.Bindings{}, x, w1, gate, other)
			sameResults(t, "matmul_gated_add "+name, f, e)
		}
	}
}

func TestFusedMoEMatchExpansion(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	const E, k, H, I, SI = 6, 2, 64, 32, 64
	for _, T := range []int{1, 4} {
		x := randTensor(rng, 1, T, H)
		ids := NewTensor(graph.I32, T, k)
		for i := range ids.I32() {
			ids.I32()[i] = int32((i*5 + i/k) % E) // distinct per token, shared across tokens
		}
		weights := randTensor(rng, 1, T, k)
		act := randTensor(rng, 1, T, k, I)
		sharedAct, sharedGate := randTensor(rng, 1, T, SI), randTensor(rng, 1, T, 1)
		for kind, wg := range weightKinds(rng, E, I, H) {
			wu := weightKinds(rng, E, I, H)[kind]
			wd := weightKinds(rng, E, H, I)[kind]
			router := weightKinds(rng, E, H)[kind]
			name := fmt.Sprintf("%s T=%d", kind, T)
			f, e := runFusedAndExpanded(t, "expert_matmul_swiglu", nil, graph.Bindings{}, x, wg, wu, ids)
			sameResults(t, "expert_matmul_swiglu "+name, f, e)
			f, e = runFusedAndExpanded(t, "expert_matmul_combine", nil, graph.Bindings{}, act, wd, ids, weights)
			sameResults(t, "expert_matmul_combine "+name, f, e)
			f, e = runFusedAndExpanded(t, "matmul_router", graph.Attrs{"k": int64(k)}, graph.Bindings{}, x, router)
			sameResults(t, "matmul_router "+name, f, e)
			// The shared expert is narrower than the routed ones (SI != I), as in the
			// tiny golden checkpoints.
			sg, su := weightKinds(rng, SI, H)[kind], weightKinds(rng, SI, H)[kind]
			sd := weightKinds(rng, H, SI)[kind]
			f, e = runFusedAndExpanded(t, "expert_matmul_swiglu_shared", nil, graph.Bindings{}, x, wg, wu, ids, sg, su)
			sameResults(t, "expert_matmul_swiglu_shared "+name, f, e)
			f, e = runFusedAndExpanded(t, "expert_matmul_combine_shared", nil, graph.Bindings{}, act, wd, ids, weights, sharedAct, sd, sharedGate)
			sameResults(t, "expert_matmul_combine_shared "+name, f, e)
			logits := randTensor(rng, 2, T, E)
			gateW := weightKinds(rng, 1, H)[kind]
			f, e = runFusedAndExpanded(t, "expert_route_swiglu_shared", graph.Attrs{"k": int64(k)}, graph.Bindings{}, x, logits, wg, wu, sg, su, gateW)
			sameResults(t, "expert_route_swiglu_shared "+name, f, e)
		}
	}
}

func TestFusedNormAndGDNMatchExpansion(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for _, T := range []int{1, 3} {
		a, b := randTensor(rng, 1, T, 32), randTensor(rng, 1, T, 32)
		w := randTensor(rng, 1, 32)
		f, e := runFusedAndExpanded(t, "add_rms_norm", graph.Attrs{"eps": 1e-6}, graph.Bindings{}, a, b, toBF16(w))
		sameResults(t, "add_rms_norm", f, e)

		// The norm inside its projections: one weight (a qmatmul or matmul) and several
		// (matmuls), of every kind.
		for kind, w1 := range weightKinds(rng, 24, 32) {
			w2 := weightKinds(rng, 8, 32)[kind]
			f, e = runFusedAndExpanded(t, "add_rms_norm_matmuls", graph.Attrs{"eps": 1e-6}, graph.Bindings{}, a, b, toBF16(w), w1)
			sameResults(t, "add_rms_norm_matmuls, one "+kind+" weight", f, e)
			f, e = runFusedAndExpanded(t, "add_rms_norm_matmuls", graph.Attrs{"eps": 1e-6}, graph.Bindings{}, a, b, toBF16(w), w1, w2)
			sameResults(t, "add_rms_norm_matmuls, two "+kind+" weights", f, e)
			if len(f) != 4 {
				t.Fatalf("add_rms_norm_matmuls of two weights gave %d results, want s, y and two projections", len(f))
			}
		}

		ga, gb := randTensor(rng, 3, T, 8), randTensor(rng, 3, T, 8)
		aLog, dt := randTensor(rng, 1, 8), toBF16(randTensor(rng, 1, 8))
		f, e = runFusedAndExpanded(t, "gdn_gates", nil, graph.Bindings{}, ga, gb, aLog, dt)
		sameResults(t, "gdn_gates", f, e)

		x := randTensor(rng, 1, T, 12)
		for _, st := range []*Tensor{randTensor(rng, 1, 3, 12), toBF16(randTensor(rng, 1, 3, 12))} {
			cw := toBF16(randTensor(rng, 0.5, 12, 4))
			// Each run gets its own copy of the state: the update may write in place.
			s1, s2 := *st, *st
			s1.Data, s2.Data = append([]byte(nil), st.Data...), append([]byte(nil), st.Data...)
			f := runOp(t, "conv1d_silu", nil, graph.Bindings{T: T}, x, &s1, cw)
			_, e := runFusedAndExpanded(t, "conv1d_silu", nil, graph.Bindings{T: T}, x, &s2, cw)
			near(t, "conv1d_silu y", f[0].F32(), e[0].F32(), 1e-6)
			for i := 0; i < f[1].Elements(); i++ {
				if f[1].Float(i) != e[1].Float(i) {
					t.Fatalf("conv1d_silu state'[%d] = %v, expansion %v", i, f[1].Float(i), e[1].Float(i))
				}
			}
		}

		qkv := randTensor(rng, 1, T, 24)
		attrs := graph.Attrs{"axis": int64(1), "start": int64(8), "end": int64(16), "shape": fmt.Sprintf("[%d,2,4]", T), "eps": 1e-6, "scale": 0.5}
		f, e = runFusedAndExpanded(t, "slice_l2_norm", attrs, graph.Bindings{}, qkv)
		sameResults(t, "slice_l2_norm", f, e)
	}
}

// By hand: gdn_gates on one head, one token.
func TestGDNGatesByHand(t *testing.T) {
	out := runOp(t, "gdn_gates", nil, graph.Bindings{},
		FromF32([]float32{0.5}, 1, 1), FromF32([]float32{0}, 1, 1), FromF32([]float32{0}, 1), FromF32([]float32{-0.5}, 1))
	// g = -exp(0) * softplus(0) = -ln 2; beta = sigmoid(0) = 0.5.
	near(t, "g", out[0].F32(), []float32{-0.6931472}, 1e-6)
	near(t, "beta", out[1].F32(), []float32{0.5}, 0)
}

// The fused cost counts the fused op's args once and its results, never the
// intermediates: a decode-shaped routed gate/up with q4 stacks reads x, the ids and k
// experts of each stack, and writes the activation only.
func TestFusedCostCountsNoIntermediates(t *testing.T) {
	const E, k, I, H = 256, 8, 512, 2048
	b := graph.NewBuilder(graph.New("cost"), Default)
	q4 := func(shape ...int) graph.Type {
		ty := graph.TensorType(graph.Q4, graph.S(shape...)...)
		ty.Group = 64
		return ty
	}
	x := b.Source("input", "x", graph.TensorType(graph.F32, graph.S(1, H)...), nil)
	ids := b.Source("input", "ids", graph.TensorType(graph.I32, graph.S(1, k)...), nil)
	wg := b.Source("weight", "wg", q4(E, I, H), nil)
	wu := b.Source("weight", "wu", q4(E, I, H), nil)
	v := b.Op("expert_matmul_swiglu", nil, x, wg, wu, ids)
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	info, _ := Default.Info(v.Op)
	c := info.Cost(v, graph.Bindings{T: 1})
	expert := int64(I*H/2 + I*H/64*4)
	if want := int64(H*4+k*4) + 2*k*expert; c.BytesRead != want {
		t.Errorf("bytes read %d, want x + ids + 2·%d experts = %d", c.BytesRead, k, want)
	}
	if want := int64(k * I * 4); c.BytesWritten != want {
		t.Errorf("bytes written %d, want the activation's %d", c.BytesWritten, want)
	}
	if want := int64(2*2*k*I*H + 6*k*I); c.Flops != want {
		t.Errorf("flops %d, want %d", c.Flops, want)
	}

	s := b.Op("add_rms_norm", graph.Attrs{"eps": 1e-6}, x, x, b.Source("weight", "n", graph.TensorType(graph.BF16, graph.S(H)...), nil))
	c = Default.byName["add_rms_norm"].Cost(s, graph.Bindings{T: 1})
	if c.BytesRead != H*4+H*2 || c.BytesWritten != 2*H*4 {
		t.Errorf("add_rms_norm of x with itself: read %d write %d, want x once (%d) + the weight (%d), two results (%d)",
			c.BytesRead, c.BytesWritten, H*4, H*2, 2*H*4)
	}
}

func TestFusedInferErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(24))
	x, w := randTensor(rng, 1, 2, 16), randTensor(rng, 1, 4, 16)
	for _, c := range []struct {
		op   string
		args []*Tensor
		want string
	}{
		{"matmuls", []*Tensor{x, w}, "at least two weights"},
		{"matmul_swiglu", []*Tensor{x, w, randTensor(rng, 1, 4, 8)}, "inner dimension"},
		{"add_rms_norm", []*Tensor{x, randTensor(rng, 1, 1, 16), randTensor(rng, 1, 16)}, "differ"},
		{"add_rms_norm_matmuls", []*Tensor{x, x, randTensor(rng, 1, 16)}, "at least one projection"},
		{"add_rms_norm_matmuls", []*Tensor{x, x, randTensor(rng, 1, 16), randTensor(rng, 1, 4, 8)}, "inner dimension"},
		{"gdn_gates", []*Tensor{x, randTensor(rng, 1, 2, 8), randTensor(rng, 1, 16), randTensor(rng, 1, 16)}, "differ"},
	} {
		_, err := opGraph(c.op, graph.Attrs{"eps": 1e-6}, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.op, err, c.want)
		}
	}
}

func TestFusedAttentionAndOutProjMatchExpansion(t *testing.T) {
	rng := rand.New(rand.NewSource(25))
	for _, T := range []int{1, 3} {
		bind := graph.Bindings{T: T, C: 5}
		x := randTensor(rng, 1, T, 2, 16)
		attrs := graph.Attrs{"eps": 1e-6, "dims": int64(8), "theta": 10000.0}
		f, e := runFusedAndExpanded(t, "rms_norm_rope", attrs, bind, x, toBF16(randTensor(rng, 1, 16)))
		sameResults(t, "rms_norm_rope", f, e)
		// The query heads read from the second half of [query | gate] rows; the keys
		// written into cache rows C..C+T-1 of an f32 and a bf16 cache.
		slice := graph.Attrs{"axis": int64(2), "start": int64(16), "end": int64(32), "eps": 1e-6, "dims": int64(8), "theta": 10000.0}
		f, e = runFusedAndExpanded(t, "slice_rms_norm_rope", slice, bind, randTensor(rng, 1, T, 2, 32), toBF16(randTensor(rng, 1, 16)))
		sameResults(t, "slice_rms_norm_rope", f, e)
		for _, cache := range []*Tensor{randTensor(rng, 1, 8, 2, 16), toBF16(randTensor(rng, 1, 8, 2, 16))} {
			f, e = runFusedAndExpanded(t, "rms_norm_rope_append", attrs, bind, cache, x, toBF16(randTensor(rng, 1, 16)))
			sameResults(t, "rms_norm_rope_append "+cache.DType.String(), f, e)
		}

		a, g := randTensor(rng, 1, T, 64), randTensor(rng, 2, T, 64)
		xo, z := randTensor(rng, 1, T, 4, 16), randTensor(rng, 1, T, 4, 16)
		wn := toBF16(randTensor(rng, 1, 16))
		for kind, w := range weightKinds(rng, 24, 64) {
			f, e := runFusedAndExpanded(t, "sigmoid_gate_matmul", nil, bind, a, g, w)
			sameResults(t, "sigmoid_gate_matmul "+kind, f, e)
			shape := graph.Attrs{"eps": 1e-6, "shape": fmt.Sprintf("[%d,64]", T)}
			f, e = runFusedAndExpanded(t, "gated_rms_norm_matmul", shape, bind, xo, z, wn, w)
			sameResults(t, "gated_rms_norm_matmul "+kind, f, e)
		}
	}
}

// sigmoid_gate_matmul over enough rows that its gate runs on the workers
// (sigmoidGateParallel) gives the expanded ops' bits, as a decode step's gate alone does.
func TestSigmoidGateMatmulParallelGate(t *testing.T) {
	rng := rand.New(rand.NewSource(59))
	for _, T := range []int{1, 40} {
		a, g := randTensor(rng, 1, T, 64), randTensor(rng, 2, T, 64)
		if T == 40 && T*64 < sigmoidGateParallel {
			t.Fatalf("%d gate elements do not reach the parallel gate", T*64)
		}
		for kind, w := range weightKinds(rng, 24, 64) {
			f, e := runFusedAndExpanded(t, "sigmoid_gate_matmul", nil, graph.Bindings{T: T}, a, g, w)
			sameResults(t, fmt.Sprintf("sigmoid_gate_matmul T=%d %s", T, kind), f, e)
		}
	}
}
