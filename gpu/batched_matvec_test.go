package gpu

import (
	"testing"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The batched matrix-vector kernels take q4 matmuls of 9..128 rows and routed-expert
// matmuls of at most 8 rows per expert (from 64 slots), only where the plan marks them;
// the lowering refuses a mark it cannot honour.
func TestBatchedMatvecLowering(t *testing.T) {
	q4 := func(shape ...int) Operand {
		return Operand{Addr: 1 << 40, DType: graph.Q4, Shape: shape, W: kernels.Weight{Data: 1 << 40, DType: kernels.DTQ4, Group: 64}}
	}
	x := func(shape ...int) Operand { return Operand{Addr: 2 << 40, DType: graph.F32, Shape: shape} }
	ids := func(T, k int) Operand { return Operand{Addr: 3 << 40, DType: graph.I32, Shape: []int{T, k}} }
	out := []Operand{{Addr: 4 << 40, DType: graph.F32}}
	marked := graph.Attrs{AttrBatchedMatvec: true}
	for _, tc := range []struct {
		name   string
		op     string
		in     []Operand
		shape  bool
		kernel string
		grid   [3]int
	}{
		{"qmatmul 128 rows", "qmatmul", []Operand{x(128, 2048), q4(8192, 2048)}, true, kernels.KernelMatvecQ4Rows, [3]int{1024, 16, 1}},
		{"qmatmul 9 rows", "qmatmul", []Operand{x(9, 512), q4(100, 512)}, true, kernels.KernelMatvecQ4Rows, [3]int{4, 2, 1}},
		{"qmatmul 8 rows: matmul_rows", "qmatmul", []Operand{x(8, 512), q4(100, 512)}, false, "", [3]int{}},
		{"qmatmul 129 rows: tiles", "qmatmul", []Operand{x(129, 512), q4(100, 512)}, false, "", [3]int{}},
		{"experts 128 tokens x 8 of 256", "expert_qmatmul", []Operand{x(128, 2048), q4(256, 512, 2048), ids(128, 8)}, true, kernels.KernelExpertMVGatherQ4, [3]int{64, 256, 1}},
		{"experts 9 rows each: tiles", "expert_qmatmul", []Operand{x(288, 2048), q4(256, 512, 2048), ids(288, 8)}, false, "", [3]int{}},
		{"experts 63 slots: per slot", "expert_qmatmul", []Operand{x(63, 64), q4(16, 40, 64), ids(63, 1)}, false, "", [3]int{}},
	} {
		shape := BatchedMatvecShape
		if tc.op == "expert_qmatmul" {
			shape = ExpertGatherShape
		}
		if got := shape(tc.op, tc.in); got != tc.shape {
			t.Errorf("%s: shape check %v, want %v", tc.name, got, tc.shape)
		}
		if !tc.shape {
			continue
		}
		l, err := CUDA.Lower(&plan.Dispatch{Op: tc.op, Attrs: marked}, tc.in, out, 5<<40)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if l.Kernel != tc.kernel || l.Grid != tc.grid || l.Block != kernels.MatvecThreads {
			t.Errorf("%s: %s %v x%d, want %s %v x%d", tc.name, l.Kernel, l.Grid, l.Block, tc.kernel, tc.grid, kernels.MatvecThreads)
		}
		plain, err := CUDA.Lower(&plan.Dispatch{Op: tc.op}, tc.in, out, 5<<40)
		if err != nil || plain.Kernel == tc.kernel {
			t.Errorf("%s unmarked: %v, %v", tc.name, plain, err)
		}
	}
	q8 := []Operand{x(32, 512), {Addr: 1 << 40, DType: graph.Q8, Shape: []int{100, 512}, W: kernels.Weight{Data: 1 << 40, DType: kernels.DTQ8, Group: 64}}}
	if _, err := CUDA.Lower(&plan.Dispatch{Op: "qmatmul", Attrs: marked}, q8, out, 5<<40); err == nil {
		t.Error("a q8 matmul marked batched_matvec lowered")
	}
	perSlot := []Operand{x(64, 2048), q4(256, 512, 2048), ids(64, 8)}
	if !ExpertPerSlotShape("expert_qmatmul", perSlot) || ExpertPerSlotShape("expert_qmatmul", []Operand{x(65, 2048), q4(256, 512, 2048), ids(65, 8)}) {
		t.Error("expert-per-slot covers 64..512 slots")
	}
	l, err := CUDA.Lower(&plan.Dispatch{Op: "expert_qmatmul", Attrs: graph.Attrs{AttrExpertPerSlot: true}}, perSlot, out, 5<<40)
	if err != nil || l.Kernel != kernels.KernelExpertMVQ4 || l.Grid != [3]int{64, 512, 1} {
		t.Errorf("expert_per_slot: %v, %v", l, err)
	}
}
