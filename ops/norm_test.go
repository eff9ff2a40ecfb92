package ops

import (
	"math"
	"math/rand"
	"testing"
)

// The norms' vector passes (scaleRowsFast, addRowsFast) write the Go loops' bits: rows of
// lengths around the vector's, scaled by a row of weights and by a constant, values that
// overflow, underflow and meet -0.
func TestScaleAndAddRowsMatchGoLoops(t *testing.T) {
	if scaleRowsFast == nil || addRowsFast == nil {
		t.Skip("no vector norm passes on this machine: the Go loops run")
	}
	rng := rand.New(rand.NewSource(45))
	fast := &Env{Kernels: KernelsFast}
	for _, n := range []int{1, 7, 8, 9, 31, 2048, 4096 + 5} {
		x, w, b := randF32(rng, n, 3), randF32(rng, n, 2), randF32(rng, n, 1)
		x[0], w[n-1] = float32(math.Copysign(0, -1)), 3e38
		if n > 2 {
			x[1], x[2] = 1e-38, 2e38
		}
		for _, scale := range []struct{ a, b float32 }{{0.37, 1}, {1.7e-3, -0.125}, {3e30, 7}} {
			for _, weights := range [][]float32{w, nil} {
				got, want := make([]float32, n), make([]float32, n)
				scaleRow(fast, got, x, weights, scale.a, scale.b)
				for i := range want {
					if weights != nil {
						want[i] = (x[i] * scale.a) * weights[i]
					} else {
						want[i] = (x[i] * scale.a) * scale.b
					}
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("n=%d a=%v weights %v: element %d = %v, the Go loop's %v", n, scale.a, weights != nil, i, got[i], want[i])
					}
				}
			}
		}
		got := make([]float32, n)
		addRow(fast, got, x, b)
		for i := range got {
			if want := x[i] + b[i]; math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("n=%d: sum %d = %v, the Go loop's %v", n, i, got[i], want)
			}
		}
	}
}
