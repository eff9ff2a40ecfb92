package gpu

import (
	"fmt"
	"testing"

	"pistil/graph"
)

// conv1d_silu_l2 is one kernel exactly where its epilogue's geometry holds: a decode step
// whose heads lie in whole SIMD groups of one conv group, the parts apart. The kernel
// cases in cuda/ and metal/kernelcheck use the shapes that say yes here, so they check the
// kernel and not the expansion.
func TestConvSiLUL2Supports(t *testing.T) {
	for _, c := range []struct {
		T, Ch, H, D, qs, ks int
		want                bool
	}{
		{1, 8192, 16, 128, 0, 2048, true}, // the model's decode step
		{1, 333, 2, 64, 192, 64, true},
		{1, 200, 3, 32, 0, 96, true},
		{3, 200, 3, 32, 0, 96, false},     // prefill: groups of 32 channels x token slices
		{1, 8192, 8, 256, 0, 2048, false}, // a head wider than a group
		{1, 400, 2, 48, 0, 96, false},     // not whole SIMD groups
		{1, 400, 2, 64, 32, 160, false},   // a head across two groups
		{1, 400, 2, 64, 0, 64, false},     // the parts overlap
		{1, 300, 2, 64, 0, 256, false},    // k past the channels
	} {
		attrs := graph.Attrs{"q_start": int64(c.qs), "q_end": int64(c.qs + c.H*c.D), "k_start": int64(c.ks), "k_end": int64(c.ks + c.H*c.D)}
		in := []Operand{{Shape: []int{c.T, c.Ch}}, {Shape: []int{3, c.Ch}}, {Shape: []int{c.Ch, 4}}}
		heads := Operand{Shape: []int{c.T, c.H, c.D}}
		out := []Operand{{Shape: []int{c.T, c.Ch}}, heads, heads, {Shape: []int{3, c.Ch}}}
		if got := supportsConvSiLUL2(attrs, in, out); got != c.want {
			t.Errorf("%s: supports %v, want %v", fmt.Sprintf("T %d Ch %d heads %dx%d q %d k %d", c.T, c.Ch, c.H, c.D, c.qs, c.ks), got, c.want)
		}
	}
}
