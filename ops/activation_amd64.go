package ops

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func siluMulAVX512(y, gate, up *float32, n int)

//go:noescape
func siluMulAVX2(y, gate, up *float32, n int)

// siluMulKernel wraps a vector SiLU of lanes lanes (kernel) as a siluMulFast.
func siluMulKernel(lanes int, kernel func(y, gate, up *float32, n int)) func(y, g, u []float32) int {
	return func(y, g, u []float32) int {
		n := len(g) &^ (lanes - 1)
		if n == 0 || len(y) < n || (u != nil && len(u) < n) {
			return 0
		}
		var up *float32
		if u != nil {
			up = unsafe.SliceData(u)
		}
		kernel(&y[0], &g[0], up, n)
		return n
	}
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		siluMulFast = siluMulKernel(8, siluMulAVX2)
		siluMulSets = append(siluMulSets, siluMulSet{"avx2", 8, siluMulFast})
	}
	if cpu.X86.HasAVX512F {
		siluMulFast = siluMulKernel(16, siluMulAVX512)
		siluMulSets = append(siluMulSets, siluMulSet{"avx512", 16, siluMulFast})
	}
}
