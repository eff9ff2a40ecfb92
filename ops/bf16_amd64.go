package ops

import "golang.org/x/sys/cpu"

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

func init() {
	if cpu.X86.HasAVX2 {
		bf16ToF32Fast = func(dst []float32, src []uint16) int {
			n := len(src) &^ 7
			if n == 0 || len(dst) < n {
				return 0
			}
			bf16ToF32AVX2(&dst[0], &src[0], n)
			return n
		}
	}
}
