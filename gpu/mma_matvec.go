package gpu

import (
	"fmt"
	"os"
	"strconv"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The decode matrix-vector products on the tensor cores (ops/kernels/matvec_mma.k): the
// mma-matvec pass marks a dispatch whose q4 matrix-vector kernel has a tensor-core twin
// (kernels.MMAMatvecTwin) with AttrMMAMatvec, and the lowering launches the twin: the
// same arguments, 16 weight rows per group of four or eight warps that share out K.

// AttrMMAMatvec (bool) runs a decode q4 matrix-vector dispatch on its kernel's
// tensor-core twin (the mma-matvec pass; MMAMatvecShape).
const AttrMMAMatvec = "mma_matvec"

// AttrIMMAMatvec (bool) runs a dispatch marked AttrMMAMatvec on the twin's integer form
// (kernels.IMMAMatvecTwin: q4 codes as u8, the activations as three s8 parts per k-step;
// the imma-matvec pass).
const AttrIMMAMatvec = "imma_matvec"

// AttrStagedMatvec (bool) runs a dispatch marked AttrMMAMatvec on the twin's staged form
// (kernels.StagedMatvecTwin: each group's weight tile copied into group memory with
// cp.async, before the programmatic-launch wait where the router does not choose it; the
// staged-matvec pass).
const AttrStagedMatvec = "staged_matvec"

// mmaMatvecOps names, for each op whose decode kernel has a tensor-core twin, which of
// its inputs are weights and whether the op takes the matrix-vector kernel at all with
// these operands (a qmatmul only at one row; the fused ops where their kernel supports
// them, otherwise expand-for-backend has split them).
//
// weights nil means every input from rest on (the fused projections' varying count).
var mmaMatvecOps = map[string]struct {
	weights []int
	rest    int
	takes   func(in []Operand) bool
}{
	"matmul":  {weights: []int{1}, takes: oneRowQ4},
	"qmatmul": {weights: []int{1}, takes: oneRowQ4},
	"matmuls": {rest: 1, takes: func(in []Operand) bool { return supportsMatmuls(nil, in, nil) }},
	"add_rms_norm_matmuls": {rest: 3, takes: func(in []Operand) bool {
		return supportsAddRMSNormMatmuls(nil, in, nil) && len(in) > 3 && in[3].DType == graph.Q4
	}},
	"matmul_swiglu":               {weights: []int{1, 2}, takes: func(in []Operand) bool { return supportsMatmulSwiGLU(nil, in, nil) }},
	"matmul_gated_add":            {weights: []int{1}, takes: func(in []Operand) bool { return len(in) == 4 && decodeQ4(in[0], in[1]) }},
	"sigmoid_gate_matmul":         {weights: []int{2}, takes: func(in []Operand) bool { return len(in) == 3 && decodeQ4(in[0], in[2]) }},
	"expert_matmul_swiglu":        {weights: []int{1, 2}, takes: func(in []Operand) bool { return supportsExpertMatmulSwiGLU(nil, in, nil) }},
	"expert_matmul_swiglu_shared": {weights: []int{1, 2, 4, 5}, takes: func(in []Operand) bool { return supportsExpertSwiGLUShared(nil, in, nil) }},
}

func oneRowQ4(in []Operand) bool {
	if len(in) < 2 || len(in[1].Shape) != 2 {
		return false
	}
	K := in[1].Shape[1]
	return K > 0 && prod(in[0].Shape) == K && q4Matvec(in[1], K)
}

// MMAMatvecShape says whether a dispatch of op with these operands runs a q4 matrix-vector
// kernel that the tensor-core twin can replace: on a target with tensor cores, every
// weight q4 in quantization groups of a multiple of the mma k-step, K a multiple of it.
func (t *Target) MMAMatvecShape(op string, in []Operand) bool {
	spec, ok := mmaMatvecOps[op]
	if !t.TensorCores || !ok || len(in) < 2 || !spec.takes(in) {
		return false
	}
	idx := spec.weights
	if idx == nil {
		for i := spec.rest; i < len(in); i++ {
			idx = append(idx, i)
		}
	}
	ws := make([]Operand, 0, len(idx))
	for _, i := range idx {
		if i >= len(in) {
			return false
		}
		ws = append(ws, in[i])
	}
	return mmaMatvecWeights(ws...)
}

// mmaMatvecWeights says whether the twins take these weights: q4 in quantization groups
// of a multiple of the mma k-step, rows of a multiple of it.
func mmaMatvecWeights(ws ...Operand) bool {
	for _, w := range ws {
		if len(w.Shape) == 0 {
			return false
		}
		K := w.Shape[len(w.Shape)-1]
		if w.DType != graph.Q4 || w.W.Group <= 0 || w.W.Group%mmaTileK != 0 || K <= 0 || K%mmaTileK != 0 {
			return false
		}
	}
	return len(ws) > 0
}

// StagedMatvecShape says whether the staged twins take a dispatch the tensor-core twins
// take: K within what a group's memory holds for the weights it multiplies at once
// (kernels.StagedMatvecMaxK: two for the SwiGLU products' gate and up).
func (t *Target) StagedMatvecShape(op string, in []Operand) bool {
	if !t.MMAMatvecShape(op, in) || len(in) < 2 {
		return false
	}
	K := in[1].Shape[len(in[1].Shape)-1] // every op's second operand (a weight or a gate of x) is K wide
	return K <= kernels.StagedMatvecMaxK(stagedMatvecWeights(op))
}

// stagedMatvecWeights is how many weights a twin's group multiplies at once for op.
func stagedMatvecWeights(op string) int {
	switch op {
	case "matmul_swiglu", "expert_matmul_swiglu", "expert_matmul_swiglu_shared":
		return 2
	}
	return 1
}

// matvecLaunch launches the q4 matrix-vector kernel name over M rows of K inputs with y
// groups along GROUP_ID_Y, or, for a dispatch marked AttrMMAMatvec, its tensor-core twin;
// ws are the weights, which the twin needs in mma k-steps.
func matvecLaunch[A any](c *ctx, d *plan.Dispatch, name string, M, K, y int, args A, ws ...Operand) (*Launch, error) {
	if !d.Attrs.Bool(AttrMMAMatvec) {
		if d.Attrs.Bool(AttrIMMAMatvec) {
			return nil, fmt.Errorf("%s: marked %s without %s (the integer form is of the tensor-core twin)", d.Op, AttrIMMAMatvec, AttrMMAMatvec)
		}
		return newKernel(name, matvecGrid(M, K, y), kernels.MatvecThreads, args)
	}
	twin, ok := kernels.MMAMatvecTwin[name]
	switch {
	case !c.t.TensorCores:
		return nil, fmt.Errorf("%s: marked %s but the %s target has no tensor-core kernels", d.Op, AttrMMAMatvec, c.t.Name)
	case !ok:
		return nil, fmt.Errorf("%s: marked %s but its kernel %s has no tensor-core twin", d.Op, AttrMMAMatvec, name)
	case !mmaMatvecWeights(ws...):
		return nil, fmt.Errorf("%s: marked %s for weights it does not take (q4 in groups of a multiple of %d, K = %d a multiple of it)", d.Op, AttrMMAMatvec, mmaTileK, K)
	}
	switch integer, staged := d.Attrs.Bool(AttrIMMAMatvec), d.Attrs.Bool(AttrStagedMatvec); {
	case integer && staged:
		return nil, fmt.Errorf("%s: marked both %s and %s (two forms of one twin)", d.Op, AttrIMMAMatvec, AttrStagedMatvec)
	case integer:
		twin = kernels.IMMAMatvecTwin[twin]
	case staged:
		if most := kernels.StagedMatvecMaxK(stagedMatvecWeights(d.Op)); K > most {
			return nil, fmt.Errorf("%s: marked %s for K = %d, wider than the %d its group memory holds", d.Op, AttrStagedMatvec, K, most)
		}
		twin = kernels.StagedMatvecTwin[twin]
	}
	grid := [3]int{ceilDiv(M, kernels.MMAMatvecRows), y, 1}
	// The group size follows the 16-row grid for every form: a staged twin's grid of
	// paired row tiles keeps the four warps that the 16-row grid gives it (eight warps
	// measured slower for the staged twins, cuda/README.md).
	threads := mmaMatvecThreads(c.t, grid[0]*grid[1])
	if d.Attrs.Bool(AttrStagedMatvec) {
		grid[0] = ceilDiv(M, kernels.StagedMatvecRows(stagedMatvecWeights(d.Op), K))
	}
	return newKernel(twin, grid, threads, args)
}

// mmaMatvecThreads is the group size of a tensor-core matrix-vector launch of this many
// groups: four warps; eight (K shared out eight ways) when the grid would leave the GPU
// short of warps; sixteen when it has fewer groups than multiprocessors, as the
// 4096-wide output projections' 128 do (Nsight Compute: 6% achieved occupancy at four
// warps, 12% at eight, one group per multiprocessor with 16 KB of loads in flight).
func mmaMatvecThreads(t *Target, groups int) int {
	if w, err := strconv.Atoi(os.Getenv("PISTIL_MVM_WARPS")); err == nil && (w == 4 || w == 8 || w == 16) {
		return 32 * w // a measurement: every twin's group this size (plans compiled in the same process)
	}
	switch {
	case groups <= t.ParallelGroups/2:
		return kernels.MMAMatvecMaxThreads
	case groups < 2*t.ParallelGroups:
		return 2 * kernels.MMAThreads
	}
	return kernels.MMAThreads
}
