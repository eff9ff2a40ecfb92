package ops

import "golang.org/x/sys/cpu"

//go:noescape
func conv4RowsAVX(y, x *float32, stride int, w *float32, n, T int)

func init() {
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
