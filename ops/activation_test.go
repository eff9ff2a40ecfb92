package ops

import (
	"math"
	"testing"
)

// TestFastActivations: the float32 sigmoid and SiLU against the float64 references over
// the range activations take, saturating cleanly at both ends. The relative error bound
// is 4e-7 plus 1e-7·|x|, the float32 rounding of the exponent x·log2 e (it matters only
// where sigmoid is tiny); below 2^-125 (x < -86) the fast ones are exactly 0.
func TestFastActivations(t *testing.T) {
	for x := float32(-100); x <= 100; x += 0.0371 {
		want := 1 / (1 + math.Exp(-float64(x)))
		rel := 4e-7 + 1e-7*math.Abs(float64(x))
		if got := float64(sigmoidF32(x)); math.Abs(got-want) > rel*want+1e-37 {
			t.Fatalf("sigmoidF32(%v) = %v, want %v", x, got, want)
		}
		if got, want := float64(siluF32(x)), float64(x)*want; math.Abs(got-want) > rel*math.Abs(want)+1e-35 {
			t.Fatalf("siluF32(%v) = %v, want %v", x, got, want)
		}
	}
	if sigmoidF32(200) != 1 || sigmoidF32(-200) != 0 {
		t.Errorf("sigmoidF32 does not saturate: %v, %v", sigmoidF32(200), sigmoidF32(-200))
	}
}

// TestSiLUGateKernels: siluGate's fast and reference paths agree, split over workers or
// not, with and without the up operand.
func TestSiLUGateKernels(t *testing.T) {
	for _, n := range []int{37, 1 << 17} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i], u[i] = float32(i%200)/10-10, float32(i%7)-3
		}
		for _, up := range [][]float32{u, nil} {
			fast, ref := make([]float32, n), make([]float32, n)
			siluGate(&Env{Workers: 2}, fast, g, up)
			siluGate(&Env{Workers: 2, Kernels: KernelsReference}, ref, g, up)
			near(t, "siluGate", fast, ref, 1e-6)
		}
	}
}
