package ops

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func scaleRowsAVX(y, x, w *float32, a, b float32, n int)

//go:noescape
func addRowsAVX(s, a, b *float32, n int)

func init() {
	if !cpu.X86.HasAVX {
		return
	}
	scaleRowsFast = func(y, x, w []float32, a, b float32) int {
		n := len(x) &^ 7
		if n == 0 {
			return 0
		}
		if len(y) < n || (w != nil && len(w) < n) {
			panic("ops: scaleRowsFast called with short rows")
		}
		scaleRowsAVX(&y[0], &x[0], unsafe.SliceData(w), a, b, n)
		return n
	}
	addRowsFast = func(s, a, b []float32) int {
		n := len(a) &^ 7
		if n == 0 {
			return 0
		}
		if len(s) < n || len(b) < n {
			panic("ops: addRowsFast called with short rows")
		}
		addRowsAVX(&s[0], &a[0], &b[0], n)
		return n
	}
}
