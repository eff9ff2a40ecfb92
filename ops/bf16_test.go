package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16ToF32Row gives BF16ToF32's bits for every pattern (NaNs, infinities, subnormals,
// signed zeros among random values) at every length around the kernel's 8-lane steps.
func TestBF16ToF32RowMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	special := []uint16{0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x0001, 0x807f, 0x3f80}
	for n := 0; n <= 41; n++ {
		src := make([]uint16, n)
		for i := range src {
			src[i] = uint16(r.Uint32())
			if i < len(special) && n%3 == 0 {
				src[i] = special[i]
			}
		}
		dst := make([]float32, n+1)
		dst[n] = 42 // past the end: untouched
		bf16ToF32Row(dst[:n], src)
		for i, h := range src {
			if got, want := math.Float32bits(dst[i]), math.Float32bits(BF16ToF32(h)); got != want {
				t.Fatalf("n %d, element %d (bf16 %#04x): %#08x, want %#08x", n, i, h, got, want)
			}
		}
		if dst[n] != 42 {
			t.Fatalf("n %d: wrote past the row", n)
		}
	}
}

func BenchmarkBF16ToF32Row(b *testing.B) {
	src := make([]uint16, 4096*256)
	dst := make([]float32, len(src))
	b.SetBytes(int64(2 * len(src)))
	for b.Loop() {
		bf16ToF32Row(dst, src)
	}
}
