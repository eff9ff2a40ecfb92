package ops

import (
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// deltaInputs are random gated_delta arguments with L2-normalised q and k, as the model
// feeds them, and decays from strong to near 1.
func deltaInputs(rng *rand.Rand, T, Hk, Hv, Dk, Dv int) []*Tensor {
	unit := func(n int) *Tensor {
		t := randTensor(rng, 1, T, Hk, Dk)
		x := t.F32()
		for r := 0; r < len(x); r += Dk {
			inv := 1 / float32(math.Sqrt(float64(dot(x[r:r+Dk], x[r:r+Dk]))))
			for i := r; i < r+Dk; i++ {
				x[i] *= inv
			}
		}
		return t
	}
	g := NewTensor(graph.F32, T, Hv)
	beta := NewTensor(graph.F32, T, Hv)
	for i := range g.F32() {
		g.F32()[i] = -float32(rng.ExpFloat64() * 0.5)
		beta.F32()[i] = rng.Float32()
	}
	return []*Tensor{unit(Dk), unit(Dk), randTensor(rng, 1, T, Hv, Dv), g, beta, randTensor(rng, 0.5, Hv, Dk, Dv)}
}

// A scalar case by hand: Dk = Dv = 1, one head, two tokens.
func TestGatedDeltaByHand(t *testing.T) {
	q := FromF32([]float32{1, 0.5}, 2, 1, 1)
	k := FromF32([]float32{1, -1}, 2, 1, 1)
	v := FromF32([]float32{2, 3}, 2, 1, 1)
	g := FromF32([]float32{float32(math.Log(0.5)), 0}, 2, 1)
	beta := FromF32([]float32{0.5, 1}, 2, 1)
	S0 := FromF32([]float32{4}, 1, 1, 1)
	// t=0: S = 0.5·4 = 2; S += 1·0.5·(2 − 1·2) → 2; o = 2·1 = 2.
	// t=1: S = 2; S += (−1)·1·(3 − (−1)·2) = 2 − 5 = −3; o = −3·0.5 = −1.5.
	for _, form := range []string{"recurrent", "chunked"} {
		out := runOp(t, "gated_delta", graph.Attrs{"form": form, "chunk": int64(64)}, graph.Bindings{T: 2}, q, k, v, g, beta, S0)
		near(t, form+" o", out[0].F32(), []float32{2, -1.5}, 1e-6)
		near(t, form+" S'", out[1].F32(), []float32{-3}, 1e-6)
	}
}

// The chunked form equals the recurrent one (within 1e-5) across several chunks with a
// partial last chunk, GQA head sharing and a non-zero initial state.
func TestGatedDeltaChunkedEqualsRecurrent(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	T, Hk, Hv, Dk, Dv := 150, 2, 4, 16, 8
	args := deltaInputs(rng, T, Hk, Hv, Dk, Dv)
	bind := graph.Bindings{T: T}
	rec := runOp(t, "gated_delta", graph.Attrs{"form": "recurrent", "chunk": int64(64)}, bind, args...)
	for _, chunk := range []int64{1, 16, 64} {
		chk := runOp(t, "gated_delta", graph.Attrs{"form": "chunked", "chunk": chunk}, bind, args...)
		near(t, "o", chk[0].F32(), rec[0].F32(), 1e-5)
		near(t, "S'", chk[1].F32(), rec[1].F32(), 1e-5)
	}
}

// Splitting the tokens across two calls that carry S gives the same result as one call,
// and the reference may update S in place.
func TestGatedDeltaStateCarry(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	T, Hk, Hv, Dk, Dv := 10, 1, 2, 8, 4
	args := deltaInputs(rng, T, Hk, Hv, Dk, Dv)
	attrs := graph.Attrs{"form": "recurrent", "chunk": int64(64)}
	whole := runOp(t, "gated_delta", attrs, graph.Bindings{T: T}, args...)

	part := func(x *Tensor, lo, hi int) *Tensor {
		row := x.Elements() / x.Shape[0]
		shape := append([]int{hi - lo}, x.Shape[1:]...)
		return FromF32(x.F32()[lo*row:hi*row], shape...)
	}
	S := FromF32(args[5].F32(), args[5].Shape...)
	info, _ := Default.Info("gated_delta")
	var o []float32
	for _, r := range [][2]int{{0, 3}, {3, 10}} {
		in := []*Tensor{part(args[0], r[0], r[1]), part(args[1], r[0], r[1]), part(args[2], r[0], r[1]),
			part(args[3], r[0], r[1]), part(args[4], r[0], r[1]), S}
		g, err := opGraph("gated_delta", attrs, in...)
		if err != nil {
			t.Fatal(err)
		}
		out := NewTensor(graph.F32, r[1]-r[0], Hv, Dv)
		if err := info.Ref(&Env{Workers: 2}, g.Values[6], in, []*Tensor{out, S}); err != nil {
			t.Fatal(err)
		}
		o = append(o, out.F32()...)
	}
	near(t, "o", o, whole[0].F32(), 1e-6)
	near(t, "S", S.F32(), whole[1].F32(), 1e-6)
}

// TestGatedDeltaFastStepMatchesLoop: the machine's recurrent step kernel (where it has
// one) against the portable loop, over head shapes it takes and ones it declines, with
// GQA sharing, many tokens and a non-zero initial state.
func TestGatedDeltaFastStepMatchesLoop(t *testing.T) {
	if gdnStepFast == nil {
		t.Skip("no fast gated delta step on this machine")
	}
	for _, sh := range []struct{ T, Hk, Hv, Dk, Dv int }{{1, 2, 4, 32, 64}, {40, 1, 2, 16, 32}, {9, 16, 32, 128, 128}, {5, 2, 2, 8, 24}} {
		rng := rand.New(rand.NewSource(int64(sh.Dk * sh.Dv)))
		args := deltaInputs(rng, sh.T, sh.Hk, sh.Hv, sh.Dk, sh.Dv)
		v := &graph.Value{Op: "gated_delta", Attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64)}}
		run := func(kernels string) (o, S []float32) {
			out := []*Tensor{NewTensor(graph.F32, sh.T, sh.Hv, sh.Dv), NewTensor(graph.F32, sh.Hv, sh.Dk, sh.Dv)}
			if err := refGatedDelta(&Env{Workers: 2, Kernels: kernels}, v, args, out); err != nil {
				t.Fatal(err)
			}
			return out[0].F32(), out[1].F32()
		}
		o, S := run(KernelsFast)
		wo, wS := run(KernelsReference)
		near(t, "o", o, wo, 1e-5)
		near(t, "S'", S, wS, 1e-5)
	}
}

// The prefill path that keeps a tile of state columns in L1 across the tokens gives the
// bits of the by-token fast path: outputs and final state, head by head.
func TestGatedDeltaTiledMatchesByToken(t *testing.T) {
	if gdnStepFast == nil {
		t.Skip("no fast gated delta step on this machine")
	}
	for _, sh := range []struct{ T, Hk, Hv, Dk, Dv int }{{40, 1, 2, 16, 32}, {9, 16, 32, 128, 128}, {3, 2, 2, 8, 64}} {
		rng := rand.New(rand.NewSource(int64(sh.T * sh.Dv)))
		args := deltaInputs(rng, sh.T, sh.Hk, sh.Hv, sh.Dk, sh.Dv)
		d := deltaDims{T: sh.T, Hk: sh.Hk, Hv: sh.Hv, Dk: sh.Dk, Dv: sh.Dv}
		run := func(tiled bool) (o, S []float32) {
			o, S = make([]float32, sh.T*sh.Hv*sh.Dv), append([]float32(nil), args[5].F32()...)
			for j := 0; j < sh.Hv; j++ {
				h := deltaHead{d: d, j: j, kh: j / (sh.Hv / sh.Hk), q: args[0].F32(), k: args[1].F32(), v: args[2].F32(),
					g: args[3].F32(), beta: args[4].F32(), o: o, S: S[j*sh.Dk*sh.Dv : (j+1)*sh.Dk*sh.Dv], fast: true}
				if tiled {
					if !h.recurrentTiled() {
						t.Fatalf("%+v: the tiled path refused the shape", sh)
					}
				} else {
					h.recurrentByToken()
				}
			}
			return o, S
		}
		o, S := run(true)
		wo, wS := run(false)
		for i := range o {
			if math.Float32bits(o[i]) != math.Float32bits(wo[i]) {
				t.Fatalf("%+v: o[%d] = %v, by token %v", sh, i, o[i], wo[i])
			}
		}
		for i := range S {
			if math.Float32bits(S[i]) != math.Float32bits(wS[i]) {
				t.Fatalf("%+v: S'[%d] = %v, by token %v", sh, i, S[i], wS[i])
			}
		}
	}
}

// Every fast step kernel of the machine gives the others' bits: the whole gated_delta op
// (prefill runs through recurrentTiled with each kernel's own tile width, decode by
// token), outputs and final state, over value dims of whole 64-column tiles, of 32-column
// ones only (the AVX-512 kernel hands those to the AVX2 one) and the model's 128.
func TestGatedDeltaStepKernelsAgree(t *testing.T) {
	if len(gdnStepKernels) < 2 {
		t.Skip("fewer than two fast gated delta steps on this machine")
	}
	defer func(f func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool, w int) {
		gdnStepFast, gdnTileCols = f, w
	}(gdnStepFast, gdnTileCols)
	for _, sh := range []struct{ T, Hk, Hv, Dk, Dv int }{{1, 16, 32, 128, 128}, {37, 2, 4, 128, 128}, {5, 1, 2, 16, 64}, {6, 2, 2, 8, 96}} {
		rng := rand.New(rand.NewSource(int64(7 * sh.T * sh.Dv)))
		args := deltaInputs(rng, sh.T, sh.Hk, sh.Hv, sh.Dk, sh.Dv)
		v := &graph.Value{Op: "gated_delta", Attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64)}}
		var want []byte
		for _, name := range []string{"avx2", "avx512"} {
			gdnStepFast, gdnTileCols = gdnStepKernels[name], map[string]int{"avx2": 32, "avx512": 64}[name]
			state := *args[5]
			state.Data = append([]byte(nil), args[5].Data...)
			out := []*Tensor{NewTensor(graph.F32, sh.T, sh.Hv, sh.Dv), &state}
			in := append(append([]*Tensor(nil), args[:5]...), &state)
			if err := refGatedDelta(&Env{Workers: 2, Kernels: KernelsFast}, v, in, out); err != nil {
				t.Fatal(err)
			}
			got := append(append([]byte(nil), out[0].Data...), state.Data...)
			if want == nil {
				want = got
			} else if string(got) != string(want) {
				t.Errorf("%+v: the %s step's outputs or state differ from avx2's (bits)", sh, name)
			}
		}
	}
}

// BenchmarkGatedDeltaPrefill is one Gated DeltaNet layer's recurrence over a 512-token
// prefill chunk at the 35B-A3B's shapes, on 2 workers.
func BenchmarkGatedDeltaPrefill(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const T = 512
	args := deltaInputs(rng, T, 16, 32, 128, 128)
	v := &graph.Value{Op: "gated_delta", Attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64)}}
	out := []*Tensor{NewTensor(graph.F32, T, 32, 128), NewTensor(graph.F32, 32, 128, 128)}
	env := &Env{Workers: 2}
	for b.Loop() {
		if err := refGatedDelta(env, v, args, out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGatedDeltaDecode is one decode step of one Gated DeltaNet layer at the
// 35B-A3B's shapes (32 value heads of 128x128 state) on 2 workers; SetBytes is the state
// read and written.
func BenchmarkGatedDeltaDecode(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	args := deltaInputs(rng, 1, 16, 32, 128, 128)
	v := &graph.Value{Op: "gated_delta", Attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64)}}
	out := []*Tensor{NewTensor(graph.F32, 1, 32, 128), args[5]} // the state updated in place
	for _, kernels := range []string{KernelsFast, KernelsReference} {
		b.Run(kernels, func(b *testing.B) {
			env := &Env{Workers: 2, Kernels: kernels}
			b.SetBytes(2 * 32 * 128 * 128 * 4)
			for b.Loop() {
				if err := refGatedDelta(env, v, args, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
