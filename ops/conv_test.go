package ops

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"pistil/graph"
)

// BenchmarkConv1DDecode: one decode step of the Gated DeltaNet short conv at the 35B-A3B's
// shapes (8192 channels, kernel 4, bf16 taps as the checkpoints store them, float32 state),
// on 2 workers.
func BenchmarkConv1DDecode(b *testing.B) { benchConv1D(b, 1) }

// BenchmarkConv1DPrefill: the same conv over a 512-token prefill chunk.
func BenchmarkConv1DPrefill(b *testing.B) { benchConv1D(b, 512) }

func benchConv1D(b *testing.B, T int) {
	rng := rand.New(rand.NewSource(1))
	const Ch, K = 8192, 4
	x := randTensor(rng, 1, T, Ch)
	state := randTensor(rng, 1, K-1, Ch)
	w := toBF16(randTensor(rng, 0.5, Ch, K))
	y := NewTensor(graph.F32, T, Ch)
	env := &Env{Workers: 2}
	for b.Loop() {
		_, release, err := convolve(env, x, state, w, y)
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

// The four-tap bf16 conv (conv4Step, and conv4Rows for runs of tokens where the machine
// has it) gives the general loop's bits: every channel of every token against
// s = Σ_j w[c,j]·X[t+j,c] summed in tap order from zero, for one token, fewer tokens than
// the state's rows, and more (whose taps then come from x in place), channel counts that
// split unevenly over 1-3 workers, under the fast and the reference kernels, with a bf16
// state as well and zero inputs (a -0 product must still sum to +0). The rows convolve
// returns are [state; x], which the state update reads.
func TestConv1DFourTapsMatchGeneralLoop(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	for _, T := range []int{1, 3, 5, 37} {
		for _, Ch := range []int{1, 7, 64, 8192 + 3} {
			const K = 4
			x := randTensor(rng, 1, T, Ch)
			for i := 0; i < len(x.F32()); i += 5 {
				x.F32()[i] = 0
			}
			w := toBF16(randTensor(rng, 0.5, Ch, K))
			// Every seventh channel all zero, state and x: its four products are zeros,
			// some of them -0, whose sum from +0 must still be +0.
			st := randTensor(rng, 1, K-1, Ch)
			for i := 0; i < len(st.F32()); i++ {
				if i%Ch%7 == 0 {
					st.F32()[i] = 0
				}
			}
			for i := 0; i < len(x.F32()); i++ {
				if i%Ch%7 == 0 {
					x.F32()[i] = 0
				}
			}
			for _, state := range []*Tensor{st, toBF16(st)} {
				X := make([]float32, (K-1+T)*Ch)
				for i := 0; i < (K-1)*Ch; i++ {
					X[i] = state.Float(i)
				}
				copy(X[(K-1)*Ch:], x.F32())
				want := make([]float32, T*Ch)
				w16 := u16(w.Data)
				for i := range want {
					tok, c := i/Ch, i%Ch
					var s float32
					for j := 0; j < K; j++ {
						s += BF16ToF32(w16[c*K+j]) * X[(tok+j)*Ch+c]
					}
					want[i] = s
				}
				for _, kernels := range []string{KernelsFast, KernelsReference} {
					for _, workers := range []int{1, 2, 3} {
						y := NewTensor(graph.F32, T, Ch)
						rows, release, err := convolve(&Env{Workers: workers, Kernels: kernels}, x, state, w, y)
						if err != nil {
							t.Fatal(err)
						}
						for r := 0; r < K-1+T; r++ {
							if !slices.Equal(rows.row(r), X[r*Ch:(r+1)*Ch]) {
								t.Fatalf("T=%d Ch=%d: row %d of [state; x] differs", T, Ch, r)
							}
						}
						release()
						for i, v := range y.F32() {
							if math.Float32bits(v) != math.Float32bits(want[i]) {
								t.Fatalf("T=%d Ch=%d state %v %s workers=%d: token %d channel %d = %v, the general loop's %v",
									T, Ch, state.DType, kernels, workers, i/Ch, i%Ch, v, want[i])
							}
						}
					}
				}
			}
		}
	}
}

// A decode step reads a float32 state in place (no copy) and its caller then writes the
// update over it, as the CPU program does with a state that is its own update: the result
// and the new state [state rows 1..K-2; x] are those of a run into a separate state, for
// a float32 and a bf16 state, fast and reference kernels.
func TestConv1DDecodeUpdatesItsStateInPlace(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	const Ch, K = 8192 + 5, 4
	x := randTensor(rng, 1, 1, Ch)
	w := toBF16(randTensor(rng, 0.5, Ch, K))
	for _, st := range []*Tensor{randTensor(rng, 1, K-1, Ch), toBF16(randTensor(rng, 1, K-1, Ch))} {
		g, err := opGraph("conv1d", nil, x, st, w)
		if err != nil {
			t.Fatal(err)
		}
		v := g.Values[3]
		for _, kernels := range []string{KernelsFast, KernelsReference} {
			env := &Env{Workers: 2, Kernels: kernels}
			apart := clones([]*Tensor{st})[0]
			wantY, wantState := NewTensor(graph.F32, 1, Ch), NewTensor(st.DType, K-1, Ch)
			if err := refConv1D(env, v, []*Tensor{x, apart, w}, []*Tensor{wantY, wantState}); err != nil {
				t.Fatal(err)
			}
			for r := 0; r < K-1; r++ {
				for c := 0; c < Ch; c++ {
					want := x.F32()[c]
					if r < K-2 {
						want = st.Float((r+1)*Ch + c)
					}
					if r == K-2 && st.DType == graph.BF16 {
						want = BF16ToF32(F32ToBF16(want))
					}
					if got := wantState.Float(r*Ch + c); got != want {
						t.Fatalf("%v state, %s: row %d channel %d of the new state = %v, want %v", st.DType, kernels, r, c, got, want)
					}
				}
			}
			inPlace := clones([]*Tensor{st})[0]
			y := NewTensor(graph.F32, 1, Ch)
			if err := refConv1D(env, v, []*Tensor{x, inPlace, w}, []*Tensor{y, inPlace}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(y.Data, wantY.Data) || !slices.Equal(inPlace.Data, wantState.Data) {
				t.Fatalf("%v state, %s: the step over its own state differs from the step into a separate one", st.DType, kernels)
			}
		}
	}
}
