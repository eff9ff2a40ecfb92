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
)

// normMatvecCases are add_rms_norm_matmuls on both of its kernels (norm-matvec-q4, norm-matvec):
// the staged tensor-core twin of matvec_fused_q4 (marked for it, as mma-matvec and
// staged-matvec mark it) at the model's input projections (four weights of K 2,048,
// two row tiles a group), one weight wider than a group's pair of tiles takes (K 4,096,
// one tile a group, the sixteen-warp grid), the lm_head's shape cut short, and a small K
// of three k-steps; and matvec_q8_norm at the router's shape. Norm weights bf16 and f32,
// residual and branch of different scales: the sum, the normed row and every projection
// are checked.
func normMatvecCases() []opCase {
	r := rand.New(rand.NewPCG(31, 32))
	q4 := func(shape ...int) *ops.Tensor { return randtensor.Quant(r, graph.Q4, shape...) }
	row := func(K int) []*ops.Tensor {
		return []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, K), 4), randtensor.Scaled(randtensor.F32(r, 1, K), 0.5)}
	}
	staged := graph.Attrs{"eps": 1e-6, gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true}
	cases := []opCase{
		{name: "add_rms_norm_matmuls 2048 to 8192, 4096, 32, 32 (the GDN input projections)", op: "add_rms_norm_matmuls", attrs: staged,
			in: append(row(2048), randtensor.BF16(r, 2048), q4(8192, 2048), q4(4096, 2048), q4(32, 2048), q4(32, 2048))},
		{name: "add_rms_norm_matmuls 2048 to 1000 (the lm_head's shape, fewer rows)", op: "add_rms_norm_matmuls", attrs: staged,
			in: append(row(2048), randtensor.BF16(r, 2048), q4(1000, 2048))},
		{name: "add_rms_norm_matmuls 4096 to 72, f32 norm weight", op: "add_rms_norm_matmuls", attrs: staged,
			in: append(row(4096), randtensor.F32(r, 4096), q4(72, 4096))},
		{name: "add_rms_norm_matmuls 192 to 40, 24, 72", op: "add_rms_norm_matmuls", attrs: staged,
			in: append(row(192), randtensor.BF16(r, 192), q4(40, 192), q4(24, 192), q4(72, 192))},
		// The normed row unread (the pass's mark for projections that are its only reader):
		// the sum and the projections written, the row left alone.
		{name: "add_rms_norm_matmuls 2048 to 8192, 4096, 32, 32, the row unread", op: "add_rms_norm_matmuls", unwritten: []int{1},
			attrs: graph.Attrs{"eps": 1e-6, gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true, gpu.AttrNormRowUnread: true},
			in:    append(row(2048), randtensor.BF16(r, 2048), q4(8192, 2048), q4(4096, 2048), q4(32, 2048), q4(32, 2048))},
		{name: "add_rms_norm_matmuls 4096 to 72, the row unread", op: "add_rms_norm_matmuls", unwritten: []int{1},
			attrs: graph.Attrs{"eps": 1e-6, gpu.AttrMMAMatvec: true, gpu.AttrStagedMatvec: true, gpu.AttrNormRowUnread: true},
			in:    append(row(4096), randtensor.BF16(r, 4096), q4(72, 4096))},
		{name: "add_rms_norm_matmuls q8 2048 to 256, the row unread", op: "add_rms_norm_matmuls", unwritten: []int{1},
			attrs: graph.Attrs{"eps": 1e-6, gpu.AttrNormRowUnread: true},
			in:    append(row(2048), randtensor.BF16(r, 2048), randtensor.Quant(r, graph.Q8, 256, 2048))},
		{name: "add_rms_norm_matmuls q8 2048 to 256 (the router)", op: "add_rms_norm_matmuls", attrs: graph.Attrs{"eps": 1e-6},
			in: append(row(2048), randtensor.BF16(r, 2048), randtensor.Quant(r, graph.Q8, 256, 2048))},
		{name: "add_rms_norm_matmuls q8 192 to 37, f32 norm weight", op: "add_rms_norm_matmuls", attrs: graph.Attrs{"eps": 1e-5},
			in: append(row(192), randtensor.F32(r, 192), randtensor.Quant(r, graph.Q8, 37, 192))},
	}
	return cases
}

// The norm inside the projections matches add_rms_norm followed by the projections (the
// op's reference) within the twins' bound: the kernels scale the products of x + b times
// the norm's weight by the norm at the end instead of multiplying the normed row, a
// float32 reordering. Under cuda/emu the staged copies happen at once; the H200 runs
// check the asynchrony.
func TestNormMatvecKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range normMatvecCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// The q4 cases lower to matvec_fused_norm_staged_q4 and the q8 ones to
// matvec_q8_norm; a q4 case not marked for the staged twins (staged-matvec off, or the
// integer form) is refused with a reason, since no other form has the norm.
func TestNormMatvecCasesLower(t *testing.T) {
	for _, c := range normMatvecCases() {
		l, err := lowerCase(c, c.attrs)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		want := kernels.KernelMatvecQ8Norm
		if c.in[3].DType == graph.Q4 {
			want = kernels.KernelMatvecFusedNormStagedQ4
		}
		if l.Kernel != want {
			t.Errorf("%s: lowered to %s, want %s", c.name, l.Kernel, want)
		}
		if c.in[3].DType != graph.Q4 {
			continue
		}
		for _, attrs := range []graph.Attrs{{"eps": 1e-6}, {"eps": 1e-6, gpu.AttrMMAMatvec: true}, {"eps": 1e-6, gpu.AttrMMAMatvec: true, gpu.AttrIMMAMatvec: true}} {
			if _, err := lowerCase(c, attrs); err == nil || !strings.Contains(err.Error(), "staged") {
				t.Errorf("%s with %v: error %v, want a refusal naming the staged twins", c.name, attrs, err)
			}
		}
	}
}
