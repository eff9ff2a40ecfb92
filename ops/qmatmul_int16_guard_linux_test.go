//go:build linux

package ops

import (
	"math/rand"
	"syscall"
	"testing"
)

// endsAtGuard returns n bytes that end where an inaccessible page begins: a kernel that
// reads one byte past them faults.
func endsAtGuard(t *testing.T, n int) []byte {
	t.Helper()
	page := syscall.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, size+page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[size:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	return mem[size-n : size : size]
}

// The row kernels read nothing past a row's last group, the weights' last bytes being
// what a memory-mapped checkpoint may end with: with the codes, the scales and the biases
// each ending at an inaccessible page, every kernel gives the portable kernel's sums for
// group counts that end units of 8 and 16 groups part way (a fault would kill the test).
func TestInt16RowKernelsReadNoFurtherThanTheRow(t *testing.T) {
	rng := rand.New(rand.NewSource(44))
	for _, G := range []int{1, 3, 8, 11, 16, 21} {
		K := G * int16Group
		const rows = 3
		w := quantize(randTensor(rng, 0.1, rows, K), 4, int16Group)
		codes, scales, biases := endsAtGuard(t, len(w.Data)), endsAtGuard(t, len(w.Scales)), endsAtGuard(t, len(w.Biases))
		copy(codes, w.Data)
		copy(scales, w.Scales)
		copy(biases, w.Biases)
		acts := make([]byte, int16RowBytes(G))
		quantizeInt16Row(randF32(rng, K, 1), G, acts)
		want := make([]float32, rows)
		q4Int16Dot1Go(codes, u16(scales), u16(biases), G, acts, want)
		for name, kernel := range int16RowKernelSets {
			got := make([]float32, rows)
			kernel(codes, u16(scales), u16(biases), G, acts, got)
			for r := range got {
				if d := got[r] - want[r]; d > 1e-4 || d < -1e-4 {
					t.Fatalf("%s G=%d row %d: %v, want %v", name, G, r, got[r], want[r])
				}
			}
		}
	}
}
