package ops

import (
	"math"
	"math/rand"
	"testing"
)

// The vector exponentials give math.Exp's bits on every float32 input they take, and stop
// for the Go loop where math.Exp leaves its main path: random bit patterns (every
// exponent, NaN and the infinities among them), dense runs across the ranges that decide
// the paths (overflow near 709.78; subnormal and zero results below -708.4; round(x·log2
// e) to even at the halves), and the gate's and the router's own ranges.
func TestVectorExpMatchesMathExp(t *testing.T) {
	if sigmoidGateFast == nil || expShiftedFast == nil {
		t.Skip("no vector exponential on this machine: the Go loops run")
	}
	rng := rand.New(rand.NewSource(46))
	// Two sets: values in the ranges that decide the paths, range after range (so that
	// most groups of eight share one path, and most take the vector one), and random bit
	// patterns, shuffled (every exponent, NaN and the infinities: most groups stop the
	// kernel).
	var ranged, patterns []float32
	for _, c := range []struct{ lo, hi float32 }{{700, 720}, {-760, -700}, {-89, 89}, {-20, 20}, {-1, 1}} {
		for range 1 << 17 {
			ranged = append(ranged, c.lo+(c.hi-c.lo)*rng.Float32())
		}
	}
	for k := -1100; k <= 1100; k++ { // x·log2(e) near k + 1/2: the rounding to even
		x := (float64(k) + 0.5) / math.Log2E
		for _, d := range []float64{-1e-4, -1e-7, 0, 1e-7, 1e-4, 0, 1e-7, -1e-7} {
			ranged = append(ranged, float32(x+d))
		}
	}
	for range 1 << 19 {
		patterns = append(patterns, math.Float32frombits(rng.Uint32()))
	}
	patterns = append(patterns, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 709.78, 709.79)
	rng.Shuffle(len(patterns), func(i, j int) { patterns[i], patterns[j] = patterns[j], patterns[i] })
	inputs := append(ranged[:len(ranged)&^7:len(ranged)&^7], patterns...)
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	a := randF32(rng, len(inputs), 2)
	got, want := make([]float32, len(inputs)), make([]float32, len(inputs))
	sigmoidGate(true, got, a, inputs)
	sigmoidGate(false, want, a, inputs)
	for i := range got {
		if !same(got[i], want[i]) {
			t.Fatalf("sigmoid gate of %v (%#x) times %v = %v, the Go loop's %v", inputs[i], math.Float32bits(inputs[i]), a[i], got[i], want[i])
		}
	}
	for _, m := range []float32{0, 3.5, -700, 88.7, float32(math.Inf(1))} {
		expShifted(true, got, inputs, m)
		expShifted(false, want, inputs, m)
		for i := range got {
			if !same(got[i], want[i]) {
				t.Fatalf("exp(%v - %v) = %v, the Go loop's %v", inputs[i], m, got[i], want[i])
			}
		}
	}
	// The kernels do the main path's groups themselves: a row of ordinary values is done
	// whole by the vector loop, and most of the ranged set (the comparisons above saw it).
	row := randF32(rng, 4096, 4)
	if n := sigmoidGateFast(got, a, row); n != len(row) {
		t.Fatalf("the vector sigmoid gate did %d of %d ordinary values", n, len(row))
	}
	if n := expShiftedFast(got, row, 10); n != len(row) {
		t.Fatalf("the vector exponential did %d of %d ordinary values", n, len(row))
	}
	vector := 0
	for i := 0; i < len(ranged)&^7; i += 8 {
		vector += sigmoidGateFast(got[i:i+8], a[i:i+8], ranged[i:i+8])
	}
	if vector < len(ranged)/2 {
		t.Fatalf("the vector sigmoid gate took only %d of the %d ranged values", vector, len(ranged))
	}
}
