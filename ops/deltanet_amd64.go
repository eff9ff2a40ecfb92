package ops

import "golang.org/x/sys/cpu"

//go:noescape
func gdnStepAVX2(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		gdnStepFast = func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool {
			if Dv%32 != 0 || Dk <= 0 || len(S) < Dk*Dv || len(q) < Dk || len(k) < Dk || len(v) < Dv || len(o) < Dv {
				return false
			}
			gdnStepAVX2(&S[0], Dk, Dv, decay, beta, &q[0], &k[0], &v[0], &o[0])
			return true
		}
	}
}
