//go:build linux

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// mmaCases are matmul and routed-expert products marked for the tensor cores, on shapes
// that are not multiples of the tiles (M, K, rows), every weight dtype, routed rows that
// fill several tiles of one expert, and experts that receive no rows.
func mmaCases() []opCase {
	r := rand.New(rand.NewPCG(11, 12))
	on := graph.Attrs{gpu.AttrTensorCores: true}
	routed := func(T, k, E, used int) *ops.Tensor {
		v := make([]int32, T*k)
		for i := 0; i < T; i++ {
			perm := r.Perm(used) // experts used..E-1 receive nothing
			for j := 0; j < k; j++ {
				v[i*k+j] = int32(perm[j])
			}
		}
		return randtensor.IDs(v, T, k)
	}
	cases := []opCase{
		{name: "qmatmul q4 70x256 to 136", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 70, 256), randtensor.Quant(r, graph.Q4, 136, 256)}},
		{name: "qmatmul q4 130x192 to 64", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 130, 192), randtensor.Quant(r, graph.Q4, 64, 192)}},
		{name: "qmatmul q4 9x64 to 200", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 9, 64), randtensor.Quant(r, graph.Q4, 200, 64)}},
		// Large enough for several 64x64 tiles along both M and the rows.
		{name: "qmatmul q4 130x128 to 8968", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 130, 128), randtensor.Quant(r, graph.Q4, 8968, 128)}},
		{name: "matmul bf16 300x64 to 4100", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 300, 64), randtensor.BF16(r, 4100, 64)}},
		{name: "qmatmul q8 33x320 to 40, K steps not a multiple of the warps", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 33, 320), randtensor.Quant(r, graph.Q8, 40, 320)}},
		{name: "qmatmul q8 33x128 to 40", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 33, 128), randtensor.Quant(r, graph.Q8, 40, 128)}},
		{name: "matmul bf16 65x128 to 24", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 65, 128), randtensor.BF16(r, 24, 128)}},
		{name: "matmul rows 3d", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 5, 4, 64), randtensor.BF16(r, 50, 64)}},
		// The q4 kernels' fp16 activations (MMA_F16=1, a tuning macro) are scaled per token
		// and k-step: values past fp16's range (65,504) and values from 1e-4 to 1e4 side by
		// side.
		{name: "qmatmul q4 40x256 to 72, activations near 1e5", op: "qmatmul", in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 40, 256), 1e5), randtensor.Quant(r, graph.Q4, 72, 256)}},
		{name: "qmatmul q4 40x256 to 72, activations from 1e-4 to 1e4", op: "qmatmul", in: []*ops.Tensor{wideRange(r, 40, 256), randtensor.Quant(r, graph.Q4, 72, 256)}},
	}
	// Each dense case three times: on matmul_mma, on matmul_mma_splitk (the mma-split-k
	// pass marks the small grids; here both kernels run every shape) and on the wide tiles
	// of matmul_mma_wide (mma-wide-rows).
	for i := range cases {
		cases[i].attrs = on
		split, wide := cases[i], cases[i]
		split.name += ", split k"
		split.attrs = graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrMMASplitK: true}
		wide.name += ", wide rows"
		wide.attrs = graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrMMAWideRows: true}
		cases = append(cases, split, wide)
	}
	// Each expert tile height, the split-k tile (16 routed rows, 32 weight rows, the
	// k-steps shared out among the warps: fewer steps than warps at K 64 and 128) and the
	// wide tile (-1: 32 routed rows, 128 weight rows, expert_mma32w).
	for _, tile := range append(slices.Clone(gpu.ExpertTiles), 0, -1) {
		at := graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(tile)}
		name := fmt.Sprintf("tile %d", tile)
		if tile == -1 {
			name = "wide rows"
			at = graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(kernels.MMAWideTileN), gpu.AttrMMAWideRows: true}
			cases = append(cases, opCase{name: "expert q4 wide rows, 50 rows per expert, 300 weight rows, K 512", op: "expert_qmatmul", attrs: at,
				in: []*ops.Tensor{randtensor.F32(r, 100, 512), randtensor.Quant(r, graph.Q4, 8, 300, 512), routed(100, 4, 8, 8)}})
		}
		if tile == 0 {
			name = "split k"
			at = graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(kernels.MMASplitKTileN), gpu.AttrExpertSplitK: true}
			cases = append(cases, opCase{name: "expert q4 split k, 50 rows per expert, K 512", op: "expert_qmatmul", attrs: at,
				in: []*ops.Tensor{randtensor.F32(r, 100, 512), randtensor.Quant(r, graph.Q4, 8, 100, 512), routed(100, 4, 8, 8)}})
		}
		cases = append(cases,
			opCase{name: "expert q4 " + name, op: "expert_qmatmul", attrs: at,
				in: []*ops.Tensor{randtensor.F32(r, 40, 128), randtensor.Quant(r, graph.Q4, 16, 72, 128), routed(40, 4, 16, 16)}},
			opCase{name: "expert q8 " + name + ", 10 of 16 experts empty", op: "expert_qmatmul", attrs: at,
				in: []*ops.Tensor{randtensor.F32(r, 30, 64), randtensor.Quant(r, graph.Q8, 16, 200, 64), routed(30, 4, 16, 6)}},
			opCase{name: "expert bf16 per-slot x " + name + ", K 192", op: "expert_matmul", attrs: at,
				in: []*ops.Tensor{randtensor.F32(r, 100, 2, 192), randtensor.BF16(r, 5, 33, 192), routed(100, 2, 5, 3)}},
		)
	}
	return cases
}

// wideRange is a T x K float32 tensor whose magnitudes spread evenly in log from 1e-4 to
// 1e4, signs random.
func wideRange(r *rand.Rand, T, K int) *ops.Tensor {
	x := randtensor.F32(r, T, K)
	v := x.F32()
	for i := range v {
		v[i] = float32(math.Copysign(math.Pow(10, 8*r.Float64()-4), float64(v[i])))
	}
	return x
}

// The tensor-core GEMMs match the CPU references within the SIMT kernels' bound (1e-5 of
// max(|ref|, 1), runOpCase): their weights reach the mma exactly (q4/q8 codes, bf16
// values) and the activations in three bf16 parts (all 24 of their bits) or, in the q4
// kernels with MMA_F16=1, two fp16 parts scaled per token and k-step (21 bits;
// matmul_mma.k). Under cuda/emu the mma is its exact
// emulation with PTX's fragment layout, so a fragment-indexing bug fails here too.
func TestMMAKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range mmaCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// The cases are valid ops and lower to the mma kernels (so the test above tests them),
// and the lowering refuses the mark where it cannot honour it.
func TestMMACasesLowerToTensorCores(t *testing.T) {
	for _, c := range mmaCases() {
		if _, _, err := referenceOf(c); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		in := make([]gpu.Operand, len(c.in))
		for i, tns := range c.in {
			in[i] = denseOperand(1<<40, tns.DType, tns.Shape)
		}
		out := []gpu.Operand{denseOperand(2<<40, graph.F32, nil)}
		l, err := gpu.CUDA.Lower(&plan.Dispatch{Op: c.op, Attrs: c.attrs}, in, out, 3<<40)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want := kernels.KernelMatmulMMA
		if c.attrs.Bool(gpu.AttrMMASplitK) {
			want = kernels.KernelMatmulMMASplitK
		}
		if c.attrs.Bool(gpu.AttrMMAWideRows) {
			want = kernels.KernelMatmulMMAWide
		}
		if c.op == "expert_qmatmul" || c.op == "expert_matmul" {
			want = map[int]string{16: kernels.KernelExpertMMA16, 32: kernels.KernelExpertMMA32, 64: kernels.KernelExpertMMA64}[c.attrs.Int(gpu.AttrExpertTile)]
			if c.attrs.Bool(gpu.AttrExpertSplitK) {
				want = kernels.KernelExpertMMASplitK
			}
			if c.attrs.Bool(gpu.AttrMMAWideRows) {
				want = kernels.KernelExpertMMA32W
			}
		}
		if q4, ok := kernels.MMAQ4Kernel[want]; ok && c.in[1].DType == graph.Q4 {
			want = q4 // the kernel for q4 weights alone
		}
		if l.Kernel != want {
			t.Errorf("%s: lowered to %s, want %s", c.name, l.Kernel, want)
		}
		if !gpu.CUDA.TensorCoreShape(c.op, in) {
			t.Errorf("%s: TensorCoreShape says no", c.name)
		}
		if _, err := gpu.Metal.Lower(&plan.Dispatch{Op: c.op, Attrs: c.attrs}, in, out, 3<<40); err == nil {
			t.Errorf("%s: Metal lowered a tensor-core dispatch", c.name)
		}
	}
	// Shapes the kernels do not take: few rows, K not a multiple of the k-step, f32/f16
	// weights. TensorCoreShape says no (so the pass never marks them) and a mark is refused.
	refused := map[string][]gpu.Operand{
		"3 rows":      {denseOperand(1<<40, graph.F32, []int{3, 64}), denseOperand(1<<40, graph.BF16, []int{8, 64})},
		"K 72":        {denseOperand(1<<40, graph.F32, []int{65, 72}), denseOperand(1<<40, graph.BF16, []int{24, 72})},
		"f32 weights": {denseOperand(1<<40, graph.F32, []int{65, 64}), denseOperand(1<<40, graph.F32, []int{24, 64})},
		"f16 weights": {denseOperand(1<<40, graph.F32, []int{65, 64}), denseOperand(1<<40, graph.F16, []int{24, 64})},
	}
	for name, in := range refused {
		if gpu.CUDA.TensorCoreShape("matmul", in) {
			t.Errorf("%s: TensorCoreShape says yes", name)
		}
		if _, err := gpu.CUDA.Lower(&plan.Dispatch{Op: "matmul", Attrs: graph.Attrs{gpu.AttrTensorCores: true}}, in, in[:1], 0); err == nil {
			t.Errorf("%s: a matmul marked for the tensor cores lowered", name)
		}
	}
	// The wide expert tiles hold 32 routed rows: a wide mark on another tile is refused.
	ex := []gpu.Operand{denseOperand(1<<40, graph.F32, []int{40, 128}), denseOperand(1<<40, graph.Q4, []int{16, 72, 128}), denseOperand(1<<40, graph.I32, []int{40, 4})}
	if _, err := gpu.CUDA.Lower(&plan.Dispatch{Op: "expert_qmatmul", Attrs: graph.Attrs{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(16)}}, ex, ex[:1], 3<<40); err != nil {
		t.Errorf("the expert tile of 16 routed rows did not lower: %v", err)
	}
	for _, at := range []graph.Attrs{
		{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(16), gpu.AttrMMAWideRows: true},
		{gpu.AttrTensorCores: true, gpu.AttrExpertTile: int64(kernels.MMASplitKTileN), gpu.AttrExpertSplitK: true, gpu.AttrMMAWideRows: true},
	} {
		if _, err := gpu.CUDA.Lower(&plan.Dispatch{Op: "expert_qmatmul", Attrs: at}, ex, ex[:1], 3<<40); err == nil {
			t.Errorf("an expert tile of %d routed rows marked %s lowered", at.Int(gpu.AttrExpertTile), gpu.AttrMMAWideRows)
		}
	}
}
