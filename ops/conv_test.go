package ops

import (
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// BenchmarkConv1DDecode: one decode step of the Gated DeltaNet short conv at the 35B-A3B's
// shapes (8192 channels, kernel 4, bf16 taps as the checkpoints store them, float32 state),
// on 2 workers.
func BenchmarkConv1DDecode(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const Ch, K = 8192, 4
	x := randTensor(rng, 1, 1, Ch)
	state := randTensor(rng, 1, K-1, Ch)
	w := toBF16(randTensor(rng, 0.5, Ch, K))
	y := NewTensor(graph.F32, 1, Ch)
	env := &Env{Workers: 2}
	for b.Loop() {
		_, release, err := convolve(env, x, state, w, y)
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

// The decode step's conv (one token, four bf16 taps: conv4Step) gives the general loop's
// bits: every channel against s = Σ_j w[c,j]·X[j,c] summed in tap order from zero, for
// channel counts that split unevenly over 1-3 workers, with a bf16 state as well.
func TestConv1DDecodeStepMatchesGeneralLoop(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	for _, Ch := range []int{1, 7, 8192 + 3} {
		const K = 4
		x := randTensor(rng, 1, 1, Ch)
		w := toBF16(randTensor(rng, 0.5, Ch, K))
		for _, state := range []*Tensor{randTensor(rng, 1, K-1, Ch), toBF16(randTensor(rng, 1, K-1, Ch))} {
			X := make([]float32, K*Ch)
			for i := 0; i < (K-1)*Ch; i++ {
				X[i] = state.Float(i)
			}
			copy(X[(K-1)*Ch:], x.F32())
			want := make([]float32, Ch)
			w16 := u16(w.Data)
			for c := range want {
				var s float32
				for j := 0; j < K; j++ {
					s += BF16ToF32(w16[c*K+j]) * X[j*Ch+c]
				}
				want[c] = s
			}
			for _, workers := range []int{1, 2, 3} {
				y := NewTensor(graph.F32, 1, Ch)
				_, release, err := convolve(&Env{Workers: workers}, x, state, w, y)
				if err != nil {
					t.Fatal(err)
				}
				release()
				for c, v := range y.F32() {
					if math.Float32bits(v) != math.Float32bits(want[c]) {
						t.Fatalf("Ch=%d state %v workers=%d: channel %d = %v, the general loop's %v", Ch, state.DType, workers, c, v, want[c])
					}
				}
			}
		}
	}
}
