package gpu

import (
	"strings"
	"testing"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// router_q8 is CUDA's alone (Metal has no device-scope fence), for a marked one-token
// matmul_router against q8 weights; everything else expands.
func TestRouterQ8OnlyWhereItApplies(t *testing.T) {
	q8 := func(E, K, group int) Operand {
		return Operand{Addr: 1 << 40, DType: graph.Q8, Shape: []int{E, K}, W: kernels.Weight{Group: int32(group)}}
	}
	x := func(T, K int) Operand { return Operand{Addr: 2 << 40, DType: graph.F32, Shape: []int{T, K}} }
	out := []Operand{{Addr: 3 << 40, DType: graph.F32, Shape: []int{1, 8}}, {Addr: 4 << 40, DType: graph.I32, Shape: []int{1, 8}}}
	marked := graph.Attrs{"k": int64(8), AttrRouterMatvec: int64(1)}
	cases := []struct {
		name   string
		t      *Target
		attrs  graph.Attrs
		in     []Operand
		wantOK bool
	}{
		{"cuda, the model's router", CUDA, marked, []Operand{x(1, 2048), q8(256, 2048, 64)}, true},
		{"metal, the model's router", Metal, marked, []Operand{x(1, 2048), q8(256, 2048, 64)}, false},
		{"cuda, unmarked", CUDA, graph.Attrs{"k": int64(8)}, []Operand{x(1, 2048), q8(256, 2048, 64)}, false},
		{"cuda, two tokens", CUDA, marked, []Operand{x(2, 2048), q8(256, 2048, 64)}, false},
		{"cuda, bf16 weights", CUDA, marked, []Operand{x(1, 2048), {Addr: 1 << 40, DType: graph.BF16, Shape: []int{256, 2048}}}, false},
		{"cuda, more experts than route_token holds", CUDA, marked, []Operand{x(1, 2048), q8(kernels.RouterMaxE+2, 2048, 64)}, false},
	}
	for _, c := range cases {
		if got := c.t.Supports("matmul_router", c.attrs, c.in, out); got != c.wantOK {
			t.Errorf("%s: Supports %v, want %v", c.name, got, c.wantOK)
		}
	}
	d := &plan.Dispatch{Op: "matmul_router", Attrs: marked}
	l, err := CUDA.Lower(d, []Operand{x(1, 2048), q8(256, 2048, 64)}, out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kernel != kernels.KernelRouterQ8 || l.Grid != [3]int{256 / kernels.MatvecQ8Rows, 1, 1} || l.Block != kernels.MatvecThreads {
		t.Errorf("cuda lowers the model's router to %s %v x%d", l.Kernel, l.Grid, l.Block)
	}
	if _, err := Metal.Lower(d, []Operand{x(1, 2048), q8(256, 2048, 64)}, out, 0); err == nil || !strings.Contains(err.Error(), "device-scope fence") {
		t.Errorf("metal lowered a marked matmul_router: %v", err)
	}
}
