package ops

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"pistil/graph"
)

// Hand-checkable cases for the norm, rope, attention, conv, elementwise and MoE refs.

func TestNormsByHand(t *testing.T) {
	x := FromF32([]float32{3, 4, 0, 0}, 2, 2) // rows [3,4] and [0,0]
	w := FromF32([]float32{1, 2}, 2)
	rms := float32(math.Sqrt(12.5))
	got := runOp(t, "rms_norm", graph.Attrs{"eps": 1e-30}, graph.Bindings{}, x, w)[0].F32()
	near(t, "rms_norm", got, []float32{3 / rms, 8 / rms, 0, 0}, 1e-6)
	got = runOp(t, "rms_norm", graph.Attrs{"eps": 1e-30}, graph.Bindings{}, x, toBF16(w))[0].F32()
	near(t, "rms_norm bf16 w", got, []float32{3 / rms, 8 / rms, 0, 0}, 1e-6)

	got = runOp(t, "l2_norm", graph.Attrs{"eps": 1e-30, "scale": 2.0}, graph.Bindings{}, x)[0].F32()
	near(t, "l2_norm", got, []float32{1.2, 1.6, 0, 0}, 1e-6)

	z := FromF32([]float32{0, 1, 2, 3}, 2, 2)
	silu1 := float32(1 / (1 + math.Exp(-1)))
	got = runOp(t, "gated_rms_norm", graph.Attrs{"eps": 1e-30}, graph.Bindings{}, x, z, w)[0].F32()
	near(t, "gated_rms_norm", got, []float32{0, 8 / rms * silu1, 0, 0}, 1e-6)
}

func TestRoPEByHand(t *testing.T) {
	// One head of 6 dims, the first 4 rotated: pairs (0,2) at frequency 1, (1,3) at 1/100.
	x := FromF32([]float32{1, 1, 0, 0, 7, 8, 1, 1, 0, 0, 7, 8}, 2, 1, 6)
	got := runOp(t, "rope", graph.Attrs{"dims": int64(4), "theta": 1e4}, graph.Bindings{T: 2, C: 5}, x)[0].F32()
	var want []float32
	for _, p := range []float64{5, 6} { // positions C+t
		want = append(want, float32(math.Cos(p)), float32(math.Cos(p/100)), float32(math.Sin(p)), float32(math.Sin(p/100)), 7, 8)
	}
	near(t, "rope", got, want, 1e-5)
	if _, err := opGraph("rope", graph.Attrs{"dims": int64(3), "theta": 1e4}, x); err == nil || !strings.Contains(err.Error(), "even") {
		t.Errorf("odd dims: %v", err)
	}
}

func TestKVAppend(t *testing.T) {
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		cache := NewTensor(dt, 4, 1, 2)
		x := FromF32([]float32{1, 2, 3, 4}, 2, 1, 2)
		out := runOp(t, "kv_append", nil, graph.Bindings{T: 2, C: 1, N: 4}, cache, x)[0]
		got := make([]float32, 8)
		for i := range got {
			got[i] = out.Float(i)
		}
		near(t, dt.String(), got, []float32{0, 0, 1, 2, 3, 4, 0, 0}, 0)
		if cache.Float(2) != 0 {
			t.Errorf("%s: the interpreter wrote the source cache", dt)
		}
		// In place: the state output aliases the input.
		info, _ := Default.Info("kv_append")
		g, _ := opGraph("kv_append", nil, cache, x)
		if err := info.Ref(&Env{Bind: graph.Bindings{T: 2, C: 2, N: 4}}, g.Values[2], []*Tensor{cache, x}, []*Tensor{cache}); err != nil {
			t.Fatal(err)
		}
		if cache.Float(4) != 1 || cache.Float(7) != 4 {
			t.Errorf("%s: in-place append did not land at rows 2..3", dt)
		}
		err := info.Ref(&Env{Bind: graph.Bindings{T: 2, C: 3, N: 4}}, g.Values[2], []*Tensor{cache, x}, []*Tensor{cache})
		if err == nil || !strings.Contains(err.Error(), "context full") {
			t.Errorf("overflow: %v", err)
		}
	}
}

// naiveAttention is the causal GQA of model-spec.md §2.3 in float64.
func naiveAttention(q, k, v []float32, T, NH, KVH, D, C int, scale float64) []float32 {
	o := make([]float32, T*NH*D)
	for t := 0; t < T; t++ {
		for h := 0; h < NH; h++ {
			kvh := h / (NH / KVH)
			n := C + t + 1
			s := make([]float64, n)
			maxS := math.Inf(-1)
			for j := 0; j < n; j++ {
				for d := 0; d < D; d++ {
					s[j] += float64(q[(t*NH+h)*D+d]) * float64(k[(j*KVH+kvh)*D+d])
				}
				s[j] *= scale
				maxS = math.Max(maxS, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - maxS)
				sum += s[j]
			}
			for d := 0; d < D; d++ {
				var acc float64
				for j := range s {
					acc += s[j] / sum * float64(v[(j*KVH+kvh)*D+d])
				}
				o[(t*NH+h)*D+d] = float32(acc)
			}
		}
	}
	return o
}

func TestAttention(t *testing.T) {
	// By hand: one head, D=1, two cache rows, query at position 1 sees both.
	q := FromF32([]float32{1}, 1, 1, 1)
	k := FromF32([]float32{0, math.Ln2, 99}, 3, 1, 1) // row 2 is beyond C+t and must be ignored
	v := FromF32([]float32{10, 40, 1e6}, 3, 1, 1)
	got := runOp(t, "attention", graph.Attrs{"scale": 1.0}, graph.Bindings{T: 1, C: 1, N: 3}, q, k, v)[0].F32()
	near(t, "by hand", got, []float32{(10 + 2*40) / 3.0}, 1e-6) // weights 1:2

	rng := rand.New(rand.NewSource(6))
	T, NH, KVH, D, C, N := 3, 4, 2, 8, 5, 10
	q = randTensor(rng, 1, T, NH, D)
	k, v = randTensor(rng, 1, N, KVH, D), randTensor(rng, 1, N, KVH, D)
	want := naiveAttention(q.F32(), k.F32(), v.F32(), T, NH, KVH, D, C, 0.3)
	got = runOp(t, "attention", graph.Attrs{"scale": 0.3}, graph.Bindings{T: T, C: C, N: N}, q, k, v)[0].F32()
	near(t, "gqa", got, want, 1e-5)
	kb, vb := toBF16(k), toBF16(v)
	want = naiveAttention(q.F32(), rowsOf(kb), rowsOf(vb), T, NH, KVH, D, C, 0.3)
	got = runOp(t, "attention", graph.Attrs{"scale": 0.3}, graph.Bindings{T: T, C: C, N: N}, q, kb, vb)[0].F32()
	near(t, "gqa bf16 cache", got, want, 1e-5)

	bad := randTensor(rng, 1, T, 3, D)
	if _, err := opGraph("attention", graph.Attrs{"scale": 1.0}, bad, k, v); err == nil || !strings.Contains(err.Error(), "multiple of kv heads") {
		t.Errorf("heads: %v", err)
	}
}

func TestConv1DByHand(t *testing.T) {
	// One channel, kernel 3: y_t = w0·X[t] + w1·X[t+1] + w2·X[t+2] over X = [state; x].
	state := FromF32([]float32{1, 2}, 2, 1)
	x := FromF32([]float32{3, 4}, 2, 1)
	w := FromF32([]float32{1, 10, 100}, 1, 3)
	out := runOp(t, "conv1d", nil, graph.Bindings{T: 2}, x, state, w)
	near(t, "y", out[0].F32(), []float32{321, 432}, 0)
	near(t, "state'", out[1].F32(), []float32{3, 4}, 0)
	// One token: the state shifts by one row; in place with a BF16 state.
	x1 := FromF32([]float32{5}, 1, 1)
	sb := toBF16(state)
	info, _ := Default.Info("conv1d")
	g, _ := opGraph("conv1d", nil, x1, sb, w)
	y := NewTensor(graph.F32, 1, 1)
	if err := info.Ref(&Env{}, g.Values[3], []*Tensor{x1, sb, w}, []*Tensor{y, sb}); err != nil {
		t.Fatal(err)
	}
	near(t, "y one token", y.F32(), []float32{1 + 20 + 500}, 0)
	near(t, "state' in place", rowsOf(&Tensor{DType: graph.BF16, Shape: []int{1, 2}, Data: sb.Data}), []float32{2, 5}, 0)
}

func TestElementwise(t *testing.T) {
	a := FromF32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	bind := graph.Bindings{}
	near(t, "add suffix", runOp(t, "add", nil, bind, a, FromF32([]float32{10, 20, 30}, 3))[0].F32(), []float32{11, 22, 33, 14, 25, 36}, 0)
	near(t, "mul [2,1]", runOp(t, "mul", nil, bind, a, FromF32([]float32{2, -1}, 2, 1))[0].F32(), []float32{2, 4, 6, -4, -5, -6}, 0)
	near(t, "mul [1,3] bf16", runOp(t, "mul", nil, bind, a, toBF16(FromF32([]float32{1, 0, 2}, 1, 3)))[0].F32(), []float32{1, 0, 6, 4, 0, 12}, 0)
	near(t, "add equal", runOp(t, "add", nil, bind, a, a)[0].F32(), []float32{2, 4, 6, 8, 10, 12}, 0)
	if _, err := opGraph("add", nil, a, FromF32([]float32{1, 2}, 2)); err == nil || !strings.Contains(err.Error(), "does not broadcast") {
		t.Errorf("broadcast: %v", err)
	}

	x := FromF32([]float32{-1, 0, 1, 30}, 4)
	sig := func(v float64) float32 { return float32(1 / (1 + math.Exp(-v))) }
	near(t, "neg", runOp(t, "neg", nil, bind, x)[0].F32(), []float32{1, 0, -1, -30}, 0)
	near(t, "exp", runOp(t, "exp", nil, bind, x)[0].F32(), []float32{float32(math.Exp(-1)), 1, float32(math.E), float32(math.Exp(30))}, 1e-6)
	near(t, "sigmoid", runOp(t, "sigmoid", nil, bind, x)[0].F32(), []float32{sig(-1), 0.5, sig(1), 1}, 1e-6)
	near(t, "silu", runOp(t, "silu", nil, bind, x)[0].F32(), []float32{-sig(-1), 0, sig(1), 30}, 1e-6)
	near(t, "softplus", runOp(t, "softplus", nil, bind, x)[0].F32(),
		[]float32{float32(math.Log1p(math.Exp(-1))), float32(math.Ln2), float32(math.Log1p(math.E)), 30}, 1e-6)
	near(t, "swiglu", runOp(t, "swiglu", nil, bind, x, FromF32([]float32{2, 2, 2, 2}, 4))[0].F32(),
		[]float32{-2 * sig(-1), 0, 2 * sig(1), 60}, 1e-6)

	s := runOp(t, "slice", graph.Attrs{"axis": int64(1), "start": int64(1), "end": int64(3)}, bind, a)[0]
	near(t, "slice", s.F32(), []float32{2, 3, 5, 6}, 0)
	if s.Shape[1] != 2 {
		t.Errorf("slice shape %v", s.Shape)
	}
	if _, err := opGraph("slice", graph.Attrs{"axis": int64(1), "start": int64(2), "end": int64(4)}, a); err == nil || !strings.Contains(err.Error(), "outside axis 1") {
		t.Errorf("slice range: %v", err)
	}
}

func TestRouterAndCombine(t *testing.T) {
	// Probabilities ∝ 1, 2, 4, 1: top-2 are experts 2 and 1 with weights 4/6 and 2/6.
	logits := FromF32([]float32{0, float32(math.Ln2), float32(2 * math.Ln2), 0}, 1, 4)
	out := runOp(t, "router", graph.Attrs{"k": int64(2)}, graph.Bindings{T: 1}, logits)
	near(t, "weights", out[0].F32(), []float32{4.0 / 6, 2.0 / 6}, 1e-6)
	if ids := out[1].I32(); ids[0] != 2 || ids[1] != 1 {
		t.Errorf("ids %v, want [2 1]", ids)
	}
	y := FromF32([]float32{1, 2, 10, 20}, 1, 2, 2)
	near(t, "combine", runOp(t, "moe_combine", nil, graph.Bindings{}, y, out[0])[0].F32(), []float32{(4 + 20) / 6.0, (8 + 40) / 6.0}, 1e-6)
	if _, err := opGraph("router", graph.Attrs{"k": int64(5)}, logits); err == nil || !strings.Contains(err.Error(), "k = 5") {
		t.Errorf("k > E: %v", err)
	}
	am := runOp(t, "argmax", nil, graph.Bindings{}, FromF32([]float32{1, 3, 3, -1, -2, -3}, 2, 3))[0].I32()
	if am[0] != 1 || am[1] != 0 {
		t.Errorf("argmax %v, want [1 0]", am)
	}
}

// expert_matmul against a per-row loop over Tensor.Row, for x per token and per (token,
// slot), dense and quantized; expert_qmatmul equals its expansion.
func TestExpertMatmul(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	E, M, K, T, k := 5, 70, 64, 4, 3
	w := randTensor(rng, 0.2, E, M, K)
	ids := NewTensor(graph.I32, T, k)
	for i := range ids.I32() {
		ids.I32()[i] = int32(rng.Intn(E))
	}
	ids.I32()[0], ids.I32()[1] = 4, 4 // an expert twice for one token
	for _, perSlot := range []bool{false, true} {
		x := randTensor(rng, 1, T, K)
		if perSlot {
			x = randTensor(rng, 1, T, k, K)
		}
		for name, wt := range map[string]*Tensor{"bf16": toBF16(w), "q4": quantize(w, 4, 64), "q8": quantize(w, 8, 32)} {
			dense := rowsOf(wt)
			want := make([]float32, T*k*M)
			for t := 0; t < T; t++ {
				for j := 0; j < k; j++ {
					xr := x.F32()[t*K : (t+1)*K]
					if perSlot {
						xr = x.F32()[(t*k+j)*K : (t*k+j+1)*K]
					}
					e := int(ids.I32()[t*k+j])
					copy(want[(t*k+j)*M:], naiveMatmul(xr, dense[e*M*K:(e+1)*M*K], K))
				}
			}
			op := "expert_matmul"
			if wt.DType.Quantized() {
				op = "expert_qmatmul"
				near(t, name+" expand", runExpanded(t, op, nil, graph.Bindings{}, x, wt, ids)[0].F32(), want, 1e-5)
			}
			near(t, name, runOp(t, op, nil, graph.Bindings{}, x, wt, ids)[0].F32(), want, 1e-5)
		}
	}
	ids.I32()[5] = int32(E)
	g, _ := opGraph("expert_matmul", nil, randTensor(rng, 1, T, K), w, ids)
	_, err := Run(g, &Env{}, func(v *graph.Value) (*Tensor, error) {
		return map[string]*Tensor{"a0": randTensor(rng, 1, T, K), "a1": w, "a2": ids}[v.Name], nil
	})
	if err == nil || !strings.Contains(err.Error(), "expert id 5") {
		t.Errorf("bad expert id: %v", err)
	}
}

// The router and the experts' combine over a prefill step's tokens split among workers
// give the bits of one worker (tokens are independent); a step with non-finite logits in
// two workers' tokens names the first of them.
func TestRouterAndCombineSplitSameBits(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	const T, E, k, H = 45, 256, 8, 96
	logits := randTensor(rng, 2, T, E)
	ys := randTensor(rng, 1, T, k, H)
	run := func(workers int, op string, attrs graph.Attrs, args ...*Tensor) ([]*Tensor, error) {
		g, err := opGraph(op, attrs, args...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(g, &Env{Workers: workers}, func(v *graph.Value) (*Tensor, error) {
			var i int
			fmt.Sscanf(v.Name, "a%d", &i)
			return args[i], nil
		})
		if err != nil {
			return nil, err
		}
		out := make([]*Tensor, len(res))
		for i := range out {
			out[i] = res[fmt.Sprintf("out%d", i)]
		}
		return out, nil
	}
	route := graph.Attrs{"k": int64(k)}
	one, err := run(1, "router", route, logits)
	if err != nil {
		t.Fatal(err)
	}
	three, err := run(3, "router", route, logits)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one[0].F32(), three[0].F32()) || !slices.Equal(one[1].I32(), three[1].I32()) {
		t.Errorf("router: three workers' weights or ids differ from one worker's")
	}
	c1, err := run(1, "moe_combine", nil, ys, one[0])
	if err != nil {
		t.Fatal(err)
	}
	c3, err := run(3, "moe_combine", nil, ys, one[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c1[0].F32(), c3[0].F32()) {
		t.Errorf("moe_combine: three workers' sums differ from one worker's")
	}
	for _, tok := range []int{40, 7} {
		for e := range E {
			logits.F32()[tok*E+e] = float32(math.NaN())
		}
	}
	if _, err := run(3, "router", route, logits); err == nil || !strings.Contains(err.Error(), "token 7 has non-finite logits") {
		t.Errorf("router over NaN logits at tokens 7 and 40: %v, want an error naming token 7", err)
	}
}
