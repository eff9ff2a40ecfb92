package ops

import "golang.org/x/sys/cpu"

//go:noescape
func gdnStepAVX2(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)

//go:noescape
func gdnStepAVX512(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)

// gdnStepKernel wraps a step kernel of tiles of cols columns behind its shape and length
// checks.
func gdnStepKernel(cols int, kernel func(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)) func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool {
	return func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool {
		if Dv%cols != 0 || Dk <= 0 || len(S) < Dk*Dv || len(q) < Dk || len(k) < Dk || len(v) < Dv || len(o) < Dv {
			return false
		}
		kernel(&S[0], Dk, Dv, decay, beta, &q[0], &k[0], &v[0], &o[0])
		return true
	}
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		gdnStepKernels["avx2"] = gdnStepKernel(32, gdnStepAVX2)
		gdnStepFast, gdnTileCols = gdnStepKernels["avx2"], 32
	}
	// Where the state's rows hold whole 64-column tiles (the 35B-A3B's 128), else the AVX2
	// kernel: a prefill run's recurrence is bound by its four FMA chains a pass, so twice
	// the columns a chain is twice the columns a pass.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		avx2, avx512 := gdnStepKernels["avx2"], gdnStepKernel(64, gdnStepAVX512)
		gdnStepKernels["avx512"] = func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool {
			return avx512(S, Dk, Dv, decay, beta, q, k, v, o) || avx2(S, Dk, Dv, decay, beta, q, k, v, o)
		}
		gdnStepFast, gdnTileCols = gdnStepKernels["avx512"], 64
	}
}
