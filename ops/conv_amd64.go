package ops

import "golang.org/x/sys/cpu"

//go:noescape
func conv4RowsAVX(y, x *float32, stride int, w *float32, n, T int)

//go:noescape
func conv4StepAVX512(y, x0, x1, x2, x3 *float32, w *uint16, n int)

func init() {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW {
		conv4StepFast = func(y []float32, w []uint16, x0, x1, x2, x3 []float32) int {
			n := len(y) &^ 15
			if n == 0 {
				return 0
			}
			if len(w) < 4*n || len(x0) < n || len(x1) < n || len(x2) < n || len(x3) < n {
				panic("ops: conv4StepFast called with short rows or weights")
			}
			conv4StepAVX512(&y[0], &x0[0], &x1[0], &x2[0], &x3[0], &w[0], n)
			return n
		}
	}
	if !cpu.X86.HasAVX {
		return
	}
	conv4Rows = func(y, x []float32, stride int, w []float32, n, T int) {
		// Every row the kernel touches lies inside its slice: token T-1's result and its
		// last tap, row T+2 of x.
		if n%8 != 0 || n > stride || len(w) < 4*n || (T > 0 && (len(y) < (T-1)*stride+n || len(x) < (T+2)*stride+n)) {
			panic("ops: conv4Rows called with short rows or weights")
		}
		if T > 0 && n > 0 {
			conv4RowsAVX(&y[0], &x[0], stride, &w[0], n, T)
		}
	}
}
