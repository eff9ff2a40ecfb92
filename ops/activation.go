package ops

import "math"

// The fast kernels' activations: sigmoid and SiLU in float32 through exp2f (relative
// error below 3e-7, float32 rounding), where the references use math.Exp in float64.
// They run over whole tensors (the SwiGLU epilogues, the conv's SiLU, the gated norm)
// and, in a prefill chunk, split over the workers.

func sigmoidF32(x float32) float32 {
	e := exp2f(-float32(math.Abs(float64(x))) * log2e) // e^-|x| <= 1: no overflow
	if x >= 0 {
		return 1 / (1 + e)
	}
	return e / (1 + e)
}

func siluF32(x float32) float32 { return x * sigmoidF32(x) }

// siluFor is the SiLU env's kernels use.
func siluFor(env *Env) func(float32) float32 {
	if env.referenceKernels() {
		return silu
	}
	return siluF32
}

// siluGateRange is siluGate over one range on the calling goroutine (fast: the fast
// kernels' loops), for callers that apply it in many small pieces (expertSwiGLUInt8: a
// row segment per work item), where siluGate's split and closure cost more than the
// SiLU.
func siluGateRange(fast bool, ys, gs, us []float32) {
	if fast && siluMulFast != nil {
		done := siluMulFast(ys, gs, us)
		ys, gs = ys[done:], gs[done:]
		if us != nil {
			us = us[done:]
		}
	}
	switch {
	case fast && us != nil:
		for i, gv := range gs {
			ys[i] = siluF32(gv) * us[i]
		}
	case fast:
		for i, gv := range gs {
			ys[i] = siluF32(gv)
		}
	case us != nil:
		for i, gv := range gs {
			ys[i] = silu(gv) * us[i]
		}
	default:
		for i, gv := range gs {
			ys[i] = silu(gv)
		}
	}
}

// siluMulFast, where the machine has it, is siluGate's fast loop in vector registers
// (activation_amd64.s: AVX-512, else AVX2): it sets y[i] = silu(g[i])·u[i] (silu(g[i])
// where u is nil) for a prefix of the elements and returns its length (a multiple of its
// lanes, 16 or 8; 0 when it took none). siluMulSets lists every one the machine has.
var (
	siluMulFast func(y, g, u []float32) int
	siluMulSets []siluMulSet
)

type siluMulSet struct {
	name  string
	lanes int
	fn    func(y, g, u []float32) int
}

// siluGate sets y[i] = silu(g[i])·u[i], or silu(g[i]) where u is nil (y may be g).
func siluGate(env *Env, y, g, u []float32) {
	fast := !env.referenceKernels()
	run := func(lo, hi int) {
		var us []float32
		if u != nil {
			us = u[lo:hi]
		}
		siluGateRange(fast, y[lo:hi], g[lo:hi], us)
	}
	n := len(g)
	if n < 1<<16 {
		run(0, n)
		return
	}
	const block = 4096
	parallelRange(env, (n+block-1)/block, func(lo, hi int) { run(lo*block, min(hi*block, n)) })
}
