package ops

import "math"

// sigmoidGateFast and expShiftedFast, where the machine has them (exp_amd64.s), run
// sigmoidGate's and expShifted's loops eight lanes at a time with math.Exp's own steps,
// so the same bits, from the start of the row up to the first group of eight that
// math.Exp would take off its main path (not finite, overflow, a subnormal or zero
// result), and return how many elements they did; the Go loops take the rest. A float64
// exponential is some 10-16 ns in math.Exp, and a token of the full model takes about
// 51,000 (4,096 in each of 10 attention gates, 256 in each of 40 routers): 26 million a
// 512-token prefill chunk.
var (
	sigmoidGateFast func(x, a, g []float32) int
	expShiftedFast  func(p, l []float32, m float32) int
)

// sigmoidGate writes x[i] = a[i]·sigmoid(g[i]) (the attention output's gate).
func sigmoidGate(fast bool, x, a, g []float32) {
	for i := 0; i < len(g); {
		if fast && sigmoidGateFast != nil {
			i += sigmoidGateFast(x[i:], a[i:], g[i:])
		}
		// The group the kernel stopped at (or the last few), in Go.
		for end := min(i+8, len(g)); i < end; i++ {
			x[i] = a[i] * sigmoid(g[i])
		}
	}
}

// expShifted writes p[i] = float32(exp(float64(l[i] - m))) (the router's softmax
// numerators).
func expShifted(fast bool, p, l []float32, m float32) {
	for i := 0; i < len(l); {
		if fast && expShiftedFast != nil {
			i += expShiftedFast(p[i:], l[i:], m)
		}
		for end := min(i+8, len(l)); i < end; i++ {
			p[i] = float32(math.Exp(float64(l[i] - m)))
		}
	}
}
