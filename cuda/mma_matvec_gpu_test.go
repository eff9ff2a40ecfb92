//go:build linux

package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// mmaMatvecCases are the decode matrix-vector products marked for their tensor-core twins
// (the mma-matvec pass): row counts that are not multiples of a group's 16, k-steps fewer
// than the four warps (K 128), not a multiple of them (192, 640) and several batches per
// warp (2048, 4096), the gates and modes of matvec_fused_q4, routed slots of one and of
// several tokens, the shared expert narrower and wider than the routed ones, and
// activations of large and small magnitude (the three-part split is exact at any scale).
func mmaMatvecCases() []opCase {
	r := rand.New(rand.NewPCG(21, 22))
	routed := func(T, k, E int) *ops.Tensor { return randtensor.Routed(r, T, k, E) }
	q4 := func(shape ...int) *ops.Tensor { return randtensor.Quant(r, graph.Q4, shape...) }
	cases := []opCase{
		{name: "qmatmul 128 to 40", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 128), q4(40, 128)}},
		{name: "qmatmul 192 to 72", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 192), q4(72, 192)}},
		{name: "qmatmul 640 to 33", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 640), q4(33, 640)}},
		{name: "qmatmul 2048 to 300", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 2048), q4(300, 2048)}},
		{name: "qmatmul 4096 to 48", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), q4(48, 4096)}},
		// The group sizes by grid: the output projections' 128 groups (sixteen warps), 138
		// groups (eight), and in the matmuls case below 2,048 (four).
		{name: "qmatmul 4096 to 2048", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), q4(2048, 4096)}},
		{name: "qmatmul 512 to 2200", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 512), q4(2200, 512)}},
		{name: "qmatmul 256 to 40, activations x1000", op: "qmatmul", in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, 256), 1000), q4(40, 256)}},
		{name: "qmatmul 256 to 40, activations x1e-3", op: "qmatmul", in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, 256), 1e-3), q4(40, 256)}},
		{name: "matmuls 128 to 40, 24, 72", op: "matmuls", in: []*ops.Tensor{randtensor.F32(r, 1, 128), q4(40, 128), q4(24, 128), q4(72, 128)}},
		{name: "matmuls 2048 to 8192, 4096, 32, 32", op: "matmuls", in: []*ops.Tensor{randtensor.F32(r, 1, 2048), q4(8192, 2048), q4(4096, 2048), q4(32, 2048), q4(32, 2048)}},
		{name: "matmul_swiglu 2048 to 40", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 2048), q4(40, 2048), q4(40, 2048)}},
		{name: "matmul_swiglu 192 to 24", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 192), q4(24, 192), q4(24, 192)}},
		{name: "matmul_gated_add 256 to 40", op: "matmul_gated_add", in: []*ops.Tensor{randtensor.F32(r, 1, 256), q4(40, 256), randtensor.F32(r, 1, 1), randtensor.F32(r, 1, 40)}},
		{name: "sigmoid_gate_matmul 4096 to 40", op: "sigmoid_gate_matmul", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), randtensor.F32(r, 1, 4096), q4(40, 4096)}},
		{name: "expert_matmul_swiglu decode", op: "expert_matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 128), q4(8, 40, 128), q4(8, 40, 128), routed(1, 4, 8)}},
		{name: "expert_matmul_swiglu 3 tokens", op: "expert_matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 3, 192), q4(8, 24, 192), q4(8, 24, 192), routed(3, 4, 8)}},
		{name: "expert_matmul_swiglu per-slot x", op: "expert_matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 128), q4(8, 40, 128), q4(8, 40, 128), routed(2, 4, 8)}},
		{name: "expert_matmul_swiglu_shared decode narrow", op: "expert_matmul_swiglu_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 128),
			q4(8, 40, 128), q4(8, 40, 128), routed(1, 4, 8), q4(24, 128), q4(24, 128)}},
		{name: "expert_matmul_swiglu_shared decode wide", op: "expert_matmul_swiglu_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 2048),
			q4(16, 36, 2048), q4(16, 36, 2048), routed(1, 8, 16), q4(72, 2048), q4(72, 2048)}},
	}
	for i := range cases {
		cases[i].attrs = graph.Attrs{gpu.AttrMMAMatvec: true}
	}
	return cases
}

// The tensor-core matrix-vector kernels match the CPU references within the SIMT
// kernels' bound (runOpCase): codes enter the mma exactly and the activations in three
// bf16 parts that sum to them exactly, so what is left is float32 accumulation. Under
// cuda/emu the mma is its exact emulation with PTX's fragment layout, so a mistake in the
// k permutation shared by the weight words and the staged activations fails here.
func TestMMAMatvecKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range mmaMatvecCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// immaMatvecCases are mmaMatvecCases marked for the integer twins (imma-matvec), with
// activations whose steps mix magnitudes (a step's parts are fixed point on its largest
// |x|, so its small values keep fewer significant bits than float32 gives them) and
// steps of zeros (no scale at all).
func immaMatvecCases() []opCase {
	r := rand.New(rand.NewPCG(25, 26))
	q4 := func(shape ...int) *ops.Tensor { return randtensor.Quant(r, graph.Q4, shape...) }
	mixed := randtensor.F32(r, 1, 2048)
	xs := mixed.F32()
	for i := range xs {
		switch i % 64 {
		case 5:
			xs[i] *= 1e4 // one large value per step
		case 9, 10, 11:
			xs[i] *= 1e-6
		}
	}
	zeros := randtensor.F32(r, 1, 256)
	for i := 64; i < 128; i++ {
		zeros.F32()[i] = 0 // the second step
	}
	cases := append(mmaMatvecCases(),
		opCase{name: "qmatmul 2048 to 300, magnitudes mixed inside steps", op: "qmatmul", in: []*ops.Tensor{mixed, q4(300, 2048)}},
		opCase{name: "qmatmul 256 to 40, a step of zeros", op: "qmatmul", in: []*ops.Tensor{zeros, q4(40, 256)}},
	)
	for i := range cases {
		cases[i].attrs = graph.Attrs{gpu.AttrMMAMatvec: true, gpu.AttrIMMAMatvec: true}
	}
	return cases
}

// The integer twins match the CPU references within the same bound: the codes and the
// activations' s8 parts multiply exactly in s32, the parts hold x to 2^-24 of each step's
// largest |x|, the rest is float32. Under cuda/emu the integer mma is its exact
// emulation with PTX's m16n8k32 fragment layout.
func TestIMMAMatvecKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range immaMatvecCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// stagedMatvecCases are mmaMatvecCases marked for the staged twins (staged-matvec), less
// those wider than a group's memory holds (the pass leaves them on the bf16 twins), plus
// the widest each form takes: one weight of K 4,096 over several groups, gate and up of
// 2,048, and the routed and shared experts at the model's widths.
func stagedMatvecCases() []opCase {
	r := rand.New(rand.NewPCG(27, 28))
	q4 := func(shape ...int) *ops.Tensor { return randtensor.Quant(r, graph.Q4, shape...) }
	var cases []opCase
	for _, c := range mmaMatvecCases() {
		if stagedTakes(c) {
			cases = append(cases, c)
		}
	}
	cases = append(cases,
		opCase{name: "qmatmul 4096 to 100", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), q4(100, 4096)}},
		opCase{name: "matmul_swiglu 2048 to 72", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 2048), q4(72, 2048), q4(72, 2048)}},
		opCase{name: "expert_matmul_swiglu_shared 2048, 64 experts", op: "expert_matmul_swiglu_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 2048),
			q4(64, 48, 2048), q4(64, 48, 2048), randtensor.Routed(r, 1, 8, 64), q4(40, 2048), q4(40, 2048)}},
	)
	for i := range cases {
		cases[i].attrs = graph.Attrs{gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true}
	}
	return cases
}

// lowerCase lowers a case's op for CUDA with these attributes, its results at made-up
// addresses: the launch a plan's dispatch of it would get.
func lowerCase(c opCase, attrs graph.Attrs) (*gpu.Launch, error) {
	types, _, err := referenceOf(c)
	if err != nil {
		return nil, err
	}
	var outs []gpu.Operand
	for i, ty := range types {
		outs = append(outs, denseOperand(uint64(20+i)<<40, ty.DType, ty.Shape.Eval(graph.Bindings{})))
	}
	return gpu.CUDA.Lower(&plan.Dispatch{Op: c.op, Attrs: attrs}, caseOperands(c.in), outs, 30<<40)
}

// stagedTakes says whether the staged-matvec pass would mark a case's dispatch.
func stagedTakes(c opCase) bool { return gpu.CUDA.StagedMatvecShape(c.op, caseOperands(c.in)) }

// caseOperands are a case's inputs as lowering operands at made-up addresses, weights
// with their quantization group.
func caseOperands(ts []*ops.Tensor) []gpu.Operand {
	in := make([]gpu.Operand, len(ts))
	for i, tns := range ts {
		in[i] = denseOperand(uint64(i+1)<<40, tns.DType, tns.Shape)
		in[i].W.Group = int32(tns.Group)
	}
	return in
}

// The staged twins match the CPU references within the twins' bound: the same products
// from group memory instead of registers. Under cuda/emu the copies happen at once, so
// this checks the tile's layout (row padding, scales and biases per row, the rows past
// M zeroed) and the K shares, not the asynchrony; the H200 runs check that.
func TestStagedMatvecKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range stagedMatvecCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// The staged cases lower to the staged form of the twin they would otherwise run, on
// the twin's group size, with one group per pair of row tiles where one weight's K
// allows (kernels.StagedMatvecRows); a dispatch marked staged whose K is wider than a
// group's memory holds is refused, and so is one marked for both other forms.
func TestStagedMatvecCasesLowerToTheStagedTwins(t *testing.T) {
	for _, c := range stagedMatvecCases() {
		twin, err := lowerCase(c, graph.Attrs{gpu.AttrMMAMatvec: true})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		l, err := lowerCase(c, c.attrs)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		weights, K := 1, c.in[1].Shape[len(c.in[1].Shape)-1]
		if strings.Contains(c.op, "swiglu") {
			weights = 2
		}
		rows := kernels.StagedMatvecRows(weights, K)
		wantX := (twin.Grid[0]*kernels.MMAMatvecRows + rows - 1) / rows // ceil(M / rows), from the twin's ceil(M / 16)
		if want := kernels.StagedMatvecTwin[twin.Kernel]; l.Kernel != want || want == "" {
			t.Errorf("%s: lowered to %s, want the staged form of %s (%q)", c.name, l.Kernel, twin.Kernel, want)
		}
		if l.Block != twin.Block || l.Grid[1] != twin.Grid[1] || l.Grid[0] != wantX {
			t.Errorf("%s: grid %v block %d, want the twin's block %d and grid y %d with %d rows a group (twin grid %v)", c.name, l.Grid, l.Block, twin.Block, twin.Grid[1], rows, twin.Grid)
		}
		if _, err := lowerCase(c, graph.Attrs{gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true, gpu.AttrIMMAMatvec: true}); err == nil {
			t.Errorf("%s: lowered although marked integer and staged", c.name)
		}
	}
	r := rand.New(rand.NewPCG(29, 30))
	for _, c := range []opCase{
		{name: "qmatmul K 8192", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 8192), randtensor.Quant(r, graph.Q4, 40, 8192)}},
		{name: "matmul_swiglu K 4096", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), randtensor.Quant(r, graph.Q4, 40, 4096), randtensor.Quant(r, graph.Q4, 40, 4096)}},
	} {
		if stagedTakes(c) {
			t.Errorf("%s: StagedMatvecShape takes it", c.name)
		}
		if _, err := lowerCase(c, graph.Attrs{gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true}); err == nil {
			t.Errorf("%s: lowered although too wide for a group's memory", c.name)
		}
	}
}

// The cases are valid ops, the pass's shape test takes them, and they lower to the
// twins of the SIMT kernels they would otherwise run; the lowering refuses the mark
// where it cannot honour it (a target without tensor cores, q8 weights, K not a
// multiple of the 64-k step, a qmatmul of several rows).
func TestMMAMatvecCasesLowerToTheTwins(t *testing.T) {
	for _, c := range mmaMatvecCases() {
		types, _, err := referenceOf(c)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		in := caseOperands(c.in)
		var outs []gpu.Operand
		for i, ty := range types {
			outs = append(outs, denseOperand(uint64(20+i)<<40, ty.DType, ty.Shape.Eval(graph.Bindings{})))
		}
		if !gpu.CUDA.MMAMatvecShape(c.op, in) {
			t.Errorf("%s: MMAMatvecShape says no", c.name)
		}
		plain, err := gpu.CUDA.Lower(&plan.Dispatch{Op: c.op}, in, outs, 30<<40)
		if err != nil {
			t.Errorf("%s unmarked: %v", c.name, err)
			continue
		}
		l, err := gpu.CUDA.Lower(&plan.Dispatch{Op: c.op, Attrs: c.attrs}, in, outs, 30<<40)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if want := kernels.MMAMatvecTwin[plain.Kernel]; l.Kernel != want || want == "" {
			t.Errorf("%s: lowered to %s, want the twin of %s (%q)", c.name, l.Kernel, plain.Kernel, want)
		}
		threads := kernels.MMAThreads
		if groups := l.Grid[0] * l.Grid[1]; groups <= gpu.CUDA.ParallelGroups/2 {
			threads = kernels.MMAMatvecMaxThreads // sixteen warps on a grid smaller than the GPU
		} else if groups < 2*gpu.CUDA.ParallelGroups {
			threads = 2 * kernels.MMAThreads // eight warps on a small grid
		}
		if l.Block != threads || l.Grid[1] != plain.Grid[1] {
			t.Errorf("%s: grid %v block %d, want grid y %d and %d threads", c.name, l.Grid, l.Block, plain.Grid[1], threads)
		}
		if gpu.Metal.MMAMatvecShape(c.op, in) {
			t.Errorf("%s: Metal takes the tensor-core twins", c.name)
		}
		if _, err := gpu.Metal.Lower(&plan.Dispatch{Op: c.op, Attrs: c.attrs}, in, outs, 30<<40); err == nil {
			t.Errorf("%s: Metal lowered a dispatch marked %s", c.name, gpu.AttrMMAMatvec)
		}
	}
	r := rand.New(rand.NewPCG(23, 24))
	marked := graph.Attrs{gpu.AttrMMAMatvec: true}
	for _, c := range []struct {
		name string
		op   string
		in   []*ops.Tensor
	}{
		{"q8 weights", "qmatmul", []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q8, 40, 128)}},
		{"K 96", "qmatmul", []*ops.Tensor{randtensor.F32(r, 1, 96), randtensor.Quant(r, graph.Q4, 40, 96)}},
		{"two rows", "qmatmul", []*ops.Tensor{randtensor.F32(r, 2, 128), randtensor.Quant(r, graph.Q4, 40, 128)}},
	} {
		in := caseOperands(c.in)
		outs := []gpu.Operand{denseOperand(20<<40, graph.F32, []int{c.in[0].Shape[0], 40})}
		if gpu.CUDA.MMAMatvecShape(c.op, in) {
			t.Errorf("%s: MMAMatvecShape takes it", c.name)
		}
		if _, err := gpu.CUDA.Lower(&plan.Dispatch{Op: c.op, Attrs: marked}, in, outs, 30<<40); err == nil {
			t.Errorf("%s: lowered although marked %s", c.name, gpu.AttrMMAMatvec)
		}
	}
}
