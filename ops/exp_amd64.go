package ops

import "golang.org/x/sys/cpu"

//go:noescape
func sigmoidGateAVX512(x, a, gate *float32, n int) int

//go:noescape
func expShiftedAVX512(p, l *float32, m float32, n int) int

func init() {
	// math.Exp takes its FMA path where the machine has AVX and FMA, which AVX-512 implies;
	// the kernels are that path's steps.
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512VL || !cpu.X86.HasFMA || !cpu.X86.HasAVX {
		return
	}
	sigmoidGateFast = func(x, a, g []float32) int {
		if len(a) < len(g) || len(x) < len(g) {
			panic("ops: sigmoidGateFast called with short rows")
		}
		if len(g) < 8 {
			return 0
		}
		return sigmoidGateAVX512(&x[0], &a[0], &g[0], len(g))
	}
	expShiftedFast = func(p, l []float32, m float32) int {
		if len(p) < len(l) {
			panic("ops: expShiftedFast called with a short row")
		}
		if len(l) < 8 {
			return 0
		}
		return expShiftedAVX512(&p[0], &l[0], m, len(l))
	}
}
