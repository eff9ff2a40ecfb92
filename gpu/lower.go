// Package gpu lowers a plan's dispatches to kernel launches for the GPU backends: which
// kernel of ops/kernels runs a dispatch, on which grid and group size, with which
// argument struct. It is backend-neutral: the CUDA backend and the Metal backend run the
// same kernel sources (ops/kernels), so they share every decision made here and keep
// only their device API (memory, compilation, command submission).
//
// The compiler calls it too (passes: expand-for-backend asks Supports which fused ops a
// backend runs as one kernel, select-kernels records each dispatch's kernel, grid and
// group size in the plan), so the plan says exactly what a backend launches, and a
// backend checks at load time that its lowering agrees with the plan.
package gpu

import (
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Operand is a dispatch argument or result resolved to device memory.
type Operand struct {
	Addr  uint64         // device address of the first element
	W     kernels.Weight // the operand as a weight (dense operands: Data = Addr)
	DType graph.DType
	Shape []int
}

// Launch is one kernel launch: the kernel, its grid of groups, the threads of a group
// and the argument struct it takes by value.
type Launch struct {
	Kernel string
	Grid   [3]int
	Block  int
	// Args is a pointer to one of the kernels.*Args structs, owned by the launch.
	Args any
}

// ArgsPointer is the address of the argument struct, what a kernel launch passes.
func (l *Launch) ArgsPointer() unsafe.Pointer { return reflect.ValueOf(l.Args).UnsafePointer() }

// ArgsSize is the byte size of the argument struct.
func (l *Launch) ArgsSize() uintptr { return reflect.TypeOf(l.Args).Elem().Size() }

// Target describes what a GPU backend's kernel choices depend on beyond shapes.
type Target struct {
	Name string
	// ParallelGroups is how many concurrent groups fill the GPU (twice its multiprocessor
	// count): attention splits its keys when a step has fewer (kv head, token) pairs.
	ParallelGroups int
	// TensorCores says the target has the mma GEMM kernels (ops/kernels/matmul_mma.k):
	// a matmul dispatch marked AttrTensorCores (the compiler's tensor-cores pass) runs on
	// them.
	TensorCores bool
	// CombineRows is the output rows a group of the experts' down-projection combines
	// takes: the kernels' MVC_ROWS for this backend (kernels.Tuning.CombineRows).
	CombineRows int
	// ChunkedDelta says the target has gated_delta_chunked (ops/kernels/deltanet_cuda.k,
	// CUDA only: 130,560 bytes of group memory, which Metal's groups do not have).
	ChunkedDelta bool
	// DeviceFence says the target's dialect has a device-scope fence and global atomics
	// (FENCE_DEVICE, ATOMIC_ADD_GLOBAL), so a launch's groups can hand their results to the
	// last of them to finish (router_q8). Metal's has not.
	DeviceFence bool
}

// The GPU targets. Their choices are fixed per target, not read from the device, so a
// plan compiled on a machine without the GPU is the plan the GPU runs.
var (
	// CUDA is tuned for the H200 (132 multiprocessors).
	CUDA = &Target{Name: "cuda", ParallelGroups: 264, TensorCores: true, CombineRows: int(kernels.CUDA.CombineRows), DeviceFence: true, ChunkedDelta: true}
	// Metal is sized for the larger Apple GPUs (up to 40 cores).
	Metal = &Target{Name: "metal", ParallelGroups: 80, CombineRows: int(kernels.Metal.CombineRows)}
)

// ctx is what lowerings need beyond the operands: the target and the address of the
// program's step-scalar buffer (kernels.StepArgs).
type ctx struct {
	t     *Target
	steps uint64
}

// lowering turns one dispatch into one kernel launch. Every dispatch is exactly one
// launch, so the plan's dependency edges are a backend's dependencies.
type lowering func(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error)

// Lower turns one dispatch into its launch. steps is the device address of the step
// scalars (kernels.StepArgs). A fused op that has no single kernel for these operands is
// an error: the compiler's expand-for-backend pass expands it before a plan gets here.
func (t *Target) Lower(d *plan.Dispatch, in, out []Operand, steps uint64) (*Launch, error) {
	lw, ok := lowerings[d.Op]
	if !ok {
		if f, fused := fusedKernels[d.Op]; fused {
			if deviceFenceOps[d.Op] && !t.DeviceFence {
				return nil, fmt.Errorf("%s: its one-kernel form needs a device-scope fence, which the %s target has not; the plan should have expanded it (expand-for-backend)", d.Op, t.Name)
			}
			if !f.supports(d.Attrs, in, out) {
				return nil, fmt.Errorf("%s: no single %s kernel for these operands; the plan should have expanded it (expand-for-backend)", d.Op, t.Name)
			}
			lw = f.lower
		} else {
			return nil, fmt.Errorf("op %s has no %s kernel (%s)", d.Op, t.Name, whyNoKernel(d.Op))
		}
	}
	return lw(&ctx{t: t, steps: steps}, d, in, out)
}

// Supports says whether a fused op with these operands runs as one kernel. Ops that are
// not fused run as one kernel whenever HasKernel says so.
func (t *Target) Supports(op string, attrs graph.Attrs, in, out []Operand) bool {
	if _, ok := lowerings[op]; ok {
		return true
	}
	f, ok := fusedKernels[op]
	return ok && (t.DeviceFence || !deviceFenceOps[op]) && f.supports(attrs, in, out)
}

func whyNoKernel(op string) string {
	if r, ok := noKernel[op]; ok {
		return r
	}
	return "not in the GPU lowering table"
}

// lowerings is the op table of the GPU backends: ops that always run as one kernel.
var lowerings = map[string]lowering{
	"embed":             lowerEmbed,
	"dequant":           lowerDequant,
	"matmul":            lowerMatmul,
	"qmatmul":           lowerMatmul,
	"expert_matmul":     lowerExpert,
	"expert_qmatmul":    lowerExpert,
	"rms_norm":          lowerRMSNorm,
	"l2_norm":           lowerL2Norm,
	"gated_rms_norm":    lowerGatedRMSNorm,
	"rope":              lowerRoPE,
	"kv_append":         lowerKVAppend,
	"attention":         lowerAttention,
	"attention_partial": lowerAttentionPartial,
	"attention_merge":   lowerAttentionMerge,
	"conv1d":            lowerConv1D,
	"gated_delta":       lowerGatedDelta,
	"gated_delta_step":  lowerGatedDeltaStep,
	"conv_state_shift":  lowerConvStateShift,
	"neg":               lowerUnary(kernels.UnaryNeg),
	"exp":               lowerUnary(kernels.UnaryExp),
	"sigmoid":           lowerUnary(kernels.UnarySigmoid),
	"silu":              lowerUnary(kernels.UnarySiLU),
	"softplus":          lowerUnary(kernels.UnarySoftplus),
	"add":               lowerBinary(kernels.BinaryAdd),
	"mul":               lowerBinary(kernels.BinaryMul),
	"swiglu":            lowerBinary(kernels.BinarySwiGLU),
	"slice":             lowerSlice,
	"router":            lowerRouter,
	"moe_combine":       lowerCombine,
	"argmax":            lowerArgmax,
}

// noKernel names the ops of ops.Default that never become a launch, and why.
var noKernel = map[string]string{
	"input":      "a source: bound to the step buffer",
	"weight":     "a source: bound to the uploaded weight",
	"state":      "a source: bound to the session's state buffer",
	"reshape":    "a view: aliases its argument, no dispatch",
	"select":     "a view: aliases a tuple element, no dispatch",
	"last_row":   "a view: aliases the last row, no dispatch",
	"slice_view": "a view: aliases a contiguous range of its argument, no dispatch",
}

// newKernel records a launch of kernel name with args (copied; the launch owns it).
func newKernel[A any](name string, grid [3]int, block int, args A) (*Launch, error) {
	a := new(A)
	*a = args
	for i := range grid {
		grid[i] = max(grid[i], 1)
	}
	if grid[1] > 65535 || grid[2] > 65535 {
		return nil, fmt.Errorf("kernel %s: grid %v exceeds the y/z limit 65535", name, grid)
	}
	return &Launch{Kernel: name, Grid: grid, Block: block, Args: a}, nil
}

// DTypeCode maps a graph dtype to the kernels' DT_* code.
func DTypeCode(dt graph.DType) (int32, error) {
	switch dt {
	case graph.F32:
		return kernels.DTF32, nil
	case graph.BF16:
		return kernels.DTBF16, nil
	case graph.F16:
		return kernels.DTF16, nil
	case graph.Q4:
		return kernels.DTQ4, nil
	case graph.Q8:
		return kernels.DTQ8, nil
	case graph.I32:
		return kernels.DTI32, nil
	}
	return 0, fmt.Errorf("dtype %s has no GPU kernel support", dt)
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// elementGrid is a 1-D grid for n elements at 256 per group; kernels loop when capped.
func elementGrid(n int) [3]int { return [3]int{min(max(ceilDiv(n, 256), 1), 1<<20), 1, 1} }

// rowBlock is a group size for a row of d elements: a multiple of 32 in [32, 256].
func rowBlock(d int) int { return min(max(ceilDiv(d, 32)*32, 32), 256) }

func wantRank(d *plan.Dispatch, o Operand, what string, rank int) error {
	if len(o.Shape) != rank {
		return fmt.Errorf("%s: %s has shape %v, want rank %d", d.Op, what, o.Shape, rank)
	}
	return nil
}

// denseCode is the DT_* code of a dense (non-quantized) operand.
func denseCode(d *plan.Dispatch, o Operand, what string) (int32, error) {
	switch o.DType {
	case graph.F32, graph.BF16, graph.F16:
		return DTypeCode(o.DType)
	}
	return 0, fmt.Errorf("%s: %s is %s; the kernel reads f32, bf16 or f16", d.Op, what, o.DType)
}

func lowerEmbed(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	table, ids := in[0], in[1]
	if err := wantRank(d, table, "table", 2); err != nil {
		return nil, err
	}
	T := prod(ids.Shape)
	return newKernel(kernels.KernelEmbed, [3]int{T, 1, 1}, rowBlock(table.Shape[1]), kernels.EmbedArgs{
		W: table.W, Ids: ids.Addr, Out: out[0].Addr, T: int32(T), Cols: int32(table.Shape[1]), Vocab: int32(table.Shape[0])})
}

func lowerDequant(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	w := in[0]
	cols := w.Shape[len(w.Shape)-1]
	rows := prod(w.Shape) / cols
	return newKernel(kernels.KernelDequant, elementGrid(rows*cols), 256, kernels.DequantArgs{
		W: w.W, Out: out[0].Addr, Rows: int32(rows), Cols: int32(cols)})
}

// checkWide checks what the wide weight and activation loads need: rows of a multiple
// of 8 elements, 16-byte aligned activations.
func checkWide(d *plan.Dispatch, K int, x uint64) error {
	if K%8 != 0 {
		return fmt.Errorf("%s: inner dimension %d is not a multiple of 8", d.Op, K)
	}
	if x%16 != 0 {
		return fmt.Errorf("%s: activations at device address %#x are not 16-byte aligned", d.Op, x)
	}
	return nil
}

func lowerMatmul(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, w := in[0], in[1]
	if err := wantRank(d, w, "weight", 2); err != nil {
		return nil, err
	}
	M, K := w.Shape[0], w.Shape[1]
	rows := prod(x.Shape) / K
	if err := checkWide(d, K, x.Addr); err != nil {
		return nil, err
	}
	args := kernels.MatmulArgs{W: w.W, X: x.Addr, Y: out[0].Addr, Rows: int32(rows), M: int32(M), K: int32(K)}
	if d.Attrs.Bool(AttrTensorCores) {
		if err := c.wantTensorCores(d, c.t.TensorCoreShape(d.Op, in)); err != nil {
			return nil, err
		}
		if rows > 65535*kernels.MMASplitKTileN {
			return nil, fmt.Errorf("%s: %d rows exceed the grid", d.Op, rows)
		}
		if d.Attrs.Bool(AttrMMASplitK) {
			return newKernel(mmaKernelFor(kernels.KernelMatmulMMASplitK, w), [3]int{ceilDiv(M, kernels.MMASplitKTileM), ceilDiv(rows, kernels.MMASplitKTileN), 1}, kernels.MMAThreads, args)
		}
		if d.Attrs.Bool(AttrMMAWideRows) {
			return newKernel(mmaKernelFor(kernels.KernelMatmulMMAWide, w), [3]int{ceilDiv(M, kernels.MMAWideTileM), ceilDiv(rows, kernels.MMAWideTileN), 1}, kernels.MMAThreads, args)
		}
		return newKernel(mmaKernelFor(kernels.KernelMatmulMMA, w), [3]int{ceilDiv(M, kernels.MMATileM), ceilDiv(rows, kernels.MMATileN), 1}, kernels.MMAThreads, args)
	}
	if rows == 1 && q4Matvec(w, K) {
		return matvecLaunch(c, d, kernels.KernelMatvecQ4, M, K, 1, args, w)
	}
	if d.Attrs.Bool(AttrMMAMatvec) {
		return nil, fmt.Errorf("%s: marked %s but %d rows of %s weights do not run the q4 matrix-vector kernel", d.Op, AttrMMAMatvec, rows, w.DType)
	}
	if d.Attrs.Bool(AttrBatchedMatvec) {
		if !q4Matvec(w, K) {
			return nil, fmt.Errorf("%s: marked %s, which needs q4 weights in 32-code chunks, not %s [%d %d] of group %d",
				d.Op, AttrBatchedMatvec, w.DType, M, K, w.W.Group)
		}
		if ceilDiv(rows, kernels.MatvecBatchRows) > 65535 {
			return nil, fmt.Errorf("%s: %d rows exceed the grid", d.Op, rows)
		}
		return newKernel(kernels.KernelMatvecQ4Rows, matvecGrid(M, K, ceilDiv(rows, kernels.MatvecBatchRows)), kernels.MatvecThreads, args)
	}
	if rows == 1 && w.DType == graph.Q8 && K%16 == 0 && w.W.Group%16 == 0 {
		return newKernel(kernels.KernelMatvecQ8, [3]int{ceilDiv(M, kernels.MatvecQ8Rows), 1, 1}, kernels.MatvecThreads, args)
	}
	if rows <= kernels.MatmulMaxRows || K%kernels.TileK != 0 {
		if rows > kernels.MatmulMaxRows {
			return nil, fmt.Errorf("%s: %d rows need the tiled kernel, which needs K %% %d == 0 (K = %d)", d.Op, rows, kernels.TileK, K)
		}
		return newKernel(kernels.KernelMatmulRows, [3]int{ceilDiv(M, 8), 1, 1}, 256, args)
	}
	return newKernel(kernels.KernelMatmulTiled, [3]int{ceilDiv(M, kernels.TileM), ceilDiv(rows, kernels.TileN), 1}, 256, args)
}

// q4Matvec says whether the 16-byte q4 matrix-vector kernels apply: 32-code chunks
// never straddle a quantization group.
func q4Matvec(w Operand, K int) bool {
	return w.DType == graph.Q4 && K%32 == 0 && w.W.Group%32 == 0
}

// expertTiledMinSlots is the routed-slot count from which experts are multiplied in
// gathered tiles instead of one SIMD group per (row, slot).
const expertTiledMinSlots = 64

func lowerExpert(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, w, ids := in[0], in[1], in[2]
	if err := wantRank(d, w, "weight", 3); err != nil {
		return nil, err
	}
	if err := wantRank(d, ids, "ids", 2); err != nil {
		return nil, err
	}
	E, M, K := w.Shape[0], w.Shape[1], w.Shape[2]
	T, topK := ids.Shape[0], ids.Shape[1]
	if err := checkWide(d, K, x.Addr); err != nil {
		return nil, err
	}
	args := kernels.ExpertArgs{W: w.W, X: x.Addr, Ids: ids.Addr, Y: out[0].Addr, T: int32(T), TopK: int32(topK),
		E: int32(E), M: int32(M), K: int32(K)}
	if len(x.Shape) == 3 {
		args.XPerSlot = 1
	}
	slots := T * topK
	if d.Attrs.Bool(AttrTensorCores) {
		if err := c.wantTensorCores(d, c.t.TensorCoreShape(d.Op, in)); err != nil {
			return nil, err
		}
		tile := d.Attrs.Int(AttrExpertTile)
		if tile == 0 {
			tile = ExpertTiles[0]
		}
		kernel, rowsPerGroup, ok := expertMMAKernel(tile)
		if !ok {
			return nil, fmt.Errorf("%s: expert tile of %d routed rows (the mma kernels have %v)", d.Op, tile, ExpertTiles)
		}
		if d.Attrs.Bool(AttrExpertSplitK) {
			if tile != kernels.MMASplitKTileN {
				return nil, fmt.Errorf("%s: marked %s with an expert tile of %d routed rows (the split-k tiles hold %d)", d.Op, AttrExpertSplitK, tile, kernels.MMASplitKTileN)
			}
			kernel, rowsPerGroup = kernels.KernelExpertMMASplitK, kernels.MMASplitKTileM
		}
		if d.Attrs.Bool(AttrMMAWideRows) {
			if tile != kernels.MMAWideTileN || d.Attrs.Bool(AttrExpertSplitK) {
				return nil, fmt.Errorf("%s: marked %s with an expert tile of %d routed rows (the wide tiles hold %d, not split)", d.Op, AttrMMAWideRows, tile, kernels.MMAWideTileN)
			}
			kernel, rowsPerGroup = kernels.KernelExpertMMA32W, kernels.MMAWideTileM
		}
		if E > 65535 {
			return nil, fmt.Errorf("%s: %d experts exceed the grid", d.Op, E)
		}
		return newKernel(mmaKernelFor(kernel, w), [3]int{ceilDiv(M, rowsPerGroup), E, 1}, kernels.MMAThreads, args)
	}
	if d.Attrs.Bool(AttrBatchedMatvec) {
		if !q4Matvec(w, K) {
			return nil, fmt.Errorf("%s: marked %s, which needs q4 weights in 32-code chunks, not %s [%d %d %d] of group %d",
				d.Op, AttrBatchedMatvec, w.DType, E, M, K, w.W.Group)
		}
		if E > 65535 {
			return nil, fmt.Errorf("%s: %d experts exceed the grid", d.Op, E)
		}
		return newKernel(kernels.KernelExpertMVGatherQ4, matvecGrid(M, K, E), kernels.MatvecThreads, args)
	}
	if d.Attrs.Bool(AttrExpertPerSlot) {
		if !q4Matvec(w, K) || slots > 65535 {
			return nil, fmt.Errorf("%s: marked %s, which needs q4 weights in 32-code chunks and at most 65535 slots, not %s [%d %d %d] of group %d, %d slots",
				d.Op, AttrExpertPerSlot, w.DType, E, M, K, w.W.Group, slots)
		}
	}
	if (slots < expertTiledMinSlots || d.Attrs.Bool(AttrExpertPerSlot)) && q4Matvec(w, K) {
		return newKernel(kernels.KernelExpertMVQ4, matvecGrid(M, K, slots), kernels.MatvecThreads, args)
	}
	if slots < expertTiledMinSlots || K%kernels.TileK != 0 {
		if slots > 65535 {
			return nil, fmt.Errorf("%s: %d routed slots exceed the grid", d.Op, slots)
		}
		return newKernel(kernels.KernelExpertRows, [3]int{ceilDiv(M, 8), slots, 1}, 256, args)
	}
	return newKernel(kernels.KernelExpertTiled, [3]int{ceilDiv(M, kernels.ExpertTileM), E, 1}, 256, args)
}

// Dispatch attributes the compiler sets for the GPU lowering (passes: tensor-cores,
// expert-tiles).
const (
	// AttrTensorCores (bool) runs a matmul, qmatmul, expert_matmul or expert_qmatmul on
	// the tensor-core mma kernels.
	AttrTensorCores = "tensor_cores"
	// AttrExpertTile (int, one of ExpertTiles) is the height in routed rows of an mma
	// expert tile; absent, the first.
	AttrExpertTile = "expert_tile"
	// AttrBatchedMatvec (bool) runs a q4 qmatmul or expert_qmatmul of a multi-token step on
	// the batched matrix-vector kernels: matvec_q4_rows (the batched-matvec pass) and
	// expert_matvec_gather_q4, each expert's routed rows gathered (expert-gather).
	AttrBatchedMatvec = "batched_matvec"
	// AttrExpertPerSlot (bool) runs an expert_qmatmul of a multi-token step on the
	// decode's expert_matvec_q4, one matrix-vector tile per routed slot (expert-per-slot).
	AttrExpertPerSlot = "expert_per_slot"
	// AttrMMASplitK (bool) runs a tensor-core matmul on matmul_mma_splitk, the k-steps
	// shared out among a group's warps (mma-split-k; MMASplitKShape).
	AttrMMASplitK = "mma_split_k"
	// AttrExpertSplitK (bool) runs a tensor-core routed-expert matmul whose tile is
	// MMASplitKTileN routed rows on expert_mma_splitk: tiles of MMASplitKTileM weight rows,
	// the k-steps shared out among a group's warps (expert-split-k; ExpertSplitKShape).
	AttrExpertSplitK = "expert_split_k"
	// AttrMMAWideRows (bool) runs a tensor-core matmul (not split-k) on matmul_mma_wide,
	// or a routed-expert matmul whose tile is MMAWideTileN routed rows on expert_mma32w:
	// tiles of MMAWideTileM weight rows, two row blocks a warp (mma-wide-rows).
	AttrMMAWideRows = "mma_wide_rows"
)

// BatchedMatvecMaxRows is the most activation rows of a q4 qmatmul, and
// ExpertGatherMaxRows the most routed rows an expert receives on average (T·k/E), for
// which the batched matrix-vector kernels are offered instead of the SIMT tiles: the
// tiles pay for their staging only with many rows (expert_tiled costs an expert's
// weights times its 16-row height however few rows arrive), the batched kernels read
// each weight once per kernels.MatvecBatchRows rows. ExpertPerSlotMaxSlots is the most
// routed slots for which the per-slot kernel is offered: it reads an expert's weights
// once per slot routed to it.
const (
	BatchedMatvecMaxRows  = 128
	ExpertGatherMaxRows   = 8
	ExpertPerSlotMaxSlots = 512
)

// BatchedMatvecShape says whether a qmatmul of a multi-token step with these operands can
// run on matvec_q4_rows: q4 weights in 32-code chunks, more rows than matmul_rows takes
// and at most BatchedMatvecMaxRows.
func BatchedMatvecShape(op string, in []Operand) bool {
	if op != "qmatmul" || len(in) < 2 || len(in[1].Shape) != 2 || in[1].Shape[1] == 0 {
		return false
	}
	w := in[1]
	rows := prod(in[0].Shape) / w.Shape[1]
	return q4Matvec(w, w.Shape[1]) && rows > kernels.MatmulMaxRows && rows <= BatchedMatvecMaxRows
}

// expertSlots is an expert_qmatmul's weight and routed slot count, if its operands are
// q4 weights the matrix-vector tiles read.
func expertSlots(op string, in []Operand) (w Operand, slots int, ok bool) {
	if op != "expert_qmatmul" || len(in) < 3 || len(in[1].Shape) != 3 || len(in[2].Shape) != 2 {
		return Operand{}, 0, false
	}
	w = in[1]
	return w, prod(in[2].Shape), q4Matvec(w, w.Shape[2])
}

// ExpertGatherShape says whether an expert_qmatmul (x, w [E, M, K], ids [T, k]) can run
// on expert_matvec_gather_q4: more routed slots than the per-slot kernel takes by
// default, and at most ExpertGatherMaxRows rows per expert on average.
func ExpertGatherShape(op string, in []Operand) bool {
	w, slots, ok := expertSlots(op, in)
	return ok && slots >= expertTiledMinSlots && slots <= ExpertGatherMaxRows*w.Shape[0]
}

// ExpertPerSlotShape says whether an expert_qmatmul can run on expert_matvec_q4 beyond
// its default range: from expertTiledMinSlots to ExpertPerSlotMaxSlots routed slots.
func ExpertPerSlotShape(op string, in []Operand) bool {
	_, slots, ok := expertSlots(op, in)
	return ok && slots >= expertTiledMinSlots && slots <= ExpertPerSlotMaxSlots
}

// ExpertTiles are the heights (routed rows per tile) of the mma expert kernels.
var ExpertTiles = []int{16, 32, 64}

// mmaKernelFor is the tensor-core kernel that multiplies w: the one for q4 weights alone
// where w is q4 (kernels.MMAQ4Kernel: fewer registers, so more groups per SM), else
// kernel, which reads the weight's type at run time.
func mmaKernelFor(kernel string, w Operand) string {
	if q4, ok := kernels.MMAQ4Kernel[kernel]; ok && w.DType == graph.Q4 {
		return q4
	}
	return kernel
}

// expertMMAKernel is the mma expert kernel for tiles of tile routed rows and the weight
// rows one group covers (4 warps of 32 rows share them with the tile's tokens).
func expertMMAKernel(tile int) (string, int, bool) {
	switch tile {
	case 16:
		return kernels.KernelExpertMMA16, 128, true
	case 32:
		return kernels.KernelExpertMMA32, 64, true
	case 64:
		return kernels.KernelExpertMMA64, 32, true
	}
	return "", 0, false
}

// ExpertTileFor picks the mma expert tile for slots routed rows over E experts: the
// smallest tile that holds the rows an expert receives on average (the largest when
// none does), so a tile is rarely mostly padding and an expert's weights are read as few
// times as its rows allow.
func ExpertTileFor(slots, E int) int {
	perExpert := ceilDiv(slots, max(E, 1))
	for _, t := range ExpertTiles {
		if perExpert <= t {
			return t
		}
	}
	return ExpertTiles[len(ExpertTiles)-1]
}

// ExpertRowsOverTile is the share of experts that receive more than tile of slots routed
// rows over E experts, were the routing uniform: each expert's rows are then Poisson with
// mean slots/E (many tokens, each choosing k of E). Those experts run their tile twice
// over their weights. Real routers favour some experts, which only fattens this tail.
func ExpertRowsOverTile(slots, E, tile int) float64 {
	mean := float64(slots) / float64(max(E, 1))
	pmf, cdf := math.Exp(-mean), 0.0
	for k := 0; k <= tile; k++ {
		if k > 0 {
			pmf *= mean / float64(k)
		}
		cdf += pmf
	}
	return max(0, 1-cdf)
}

// TensorCoreShape says whether a matmul-family dispatch with these operands gains from
// the tensor-core kernels: the shapes that would otherwise run on a SIMT tile (more
// than kernels.MatmulMaxRows activation rows, expertTiledMinSlots routed slots), on a
// target that has them, with weights they take: q4/q8 in quantization groups that are
// multiples of their k-step, or bf16, and K a multiple of the k-step (f16/f32 weights
// and other K run on the SIMT tiles).
func (t *Target) TensorCoreShape(op string, in []Operand) bool {
	if !t.TensorCores || len(in) < 2 {
		return false
	}
	x, w := in[0], in[1]
	switch w.DType {
	case graph.Q4, graph.Q8:
		if w.W.Group%mmaTileK != 0 {
			return false // the kernels apply one group's scale and bias per k-step
		}
	case graph.BF16:
	default:
		return false
	}
	switch op {
	case "matmul", "qmatmul":
		if len(w.Shape) != 2 || w.Shape[1] == 0 {
			return false
		}
		return w.Shape[1]%mmaTileK == 0 && prod(x.Shape)/w.Shape[1] > kernels.MatmulMaxRows
	case "expert_matmul", "expert_qmatmul":
		if len(w.Shape) != 3 || len(in) < 3 {
			return false
		}
		return w.Shape[2]%mmaTileK == 0 && prod(in[2].Shape) >= expertTiledMinSlots
	}
	return false
}

// MMASplitKShape says whether a matmul marked for the tensor cores gains from
// matmul_mma_splitk (the k-steps shared out among a group's warps) over matmul_mma:
// when matmul_mma's 64x64 tiles would give the GPU fewer groups than it runs at once
// (ParallelGroups), as short prefill steps and small matmuls do. There each warp's
// sequential walk of K, not the arithmetic, sets the time (Nsight Compute: 88 µs per
// launch at 16 rows where the weights stream in about 10).
func (t *Target) MMASplitKShape(op string, in []Operand) bool {
	if (op != "matmul" && op != "qmatmul") || !t.TensorCoreShape(op, in) {
		return false
	}
	return MMATiles(in) < t.ParallelGroups
}

// MMATiles is how many 64x64 tiles (matmul_mma's groups; the wide tile's 128x32 are as
// many) the product of a matmul-family dispatch's operands (activations, weights) has.
func MMATiles(in []Operand) int {
	M, K := in[1].Shape[0], in[1].Shape[1]
	rows := prod(in[0].Shape) / K
	return ceilDiv(M, kernels.MMATileM) * ceilDiv(rows, kernels.MMATileN)
}

// ExpertSplitKShape says whether a routed-expert matmul marked for the tensor cores
// gains from expert_mma_splitk over expert_mma16: when its experts receive at most
// MMASplitKTileN rows on average (T·k/E; 512 tokens of the full model give 16), so each
// expert is one tile of few rows and a group of 128 weight rows walking all of K, with
// two group barriers a step, sets the time (H200 profile of a 512-token chunk: 634 µs per
// launch, 0.24 TB/s of weights).
func (t *Target) ExpertSplitKShape(op string, in []Operand) bool {
	if (op != "expert_matmul" && op != "expert_qmatmul") || !t.TensorCoreShape(op, in) {
		return false // (which also checks for the weights [E, M, K] and the ids)
	}
	return ExpertTileFor(prod(in[2].Shape), in[1].Shape[0]) == kernels.MMASplitKTileN
}

// mmaTileK is MMA_KS, the mma kernels' k-step: each lane reads 16 consecutive weights of
// a row per step (matmul_mma.k).
const mmaTileK = 64

// wantTensorCores checks that a dispatch marked for the tensor cores can have them.
func (c *ctx) wantTensorCores(d *plan.Dispatch, shapeOK bool) error {
	if !c.t.TensorCores {
		return fmt.Errorf("%s: marked %s but the %s target has no tensor-core kernels", d.Op, AttrTensorCores, c.t.Name)
	}
	if !shapeOK {
		return fmt.Errorf("%s: marked %s for a shape they do not take (few rows, weights not q4/q8/bf16, K or a quantization group not a multiple of %d)", d.Op, AttrTensorCores, mmaTileK)
	}
	return nil
}

func lowerRMSNorm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, w := in[0], in[1]
	D := x.Shape[len(x.Shape)-1]
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	return newKernel(kernels.KernelRMSNorm, [3]int{prod(x.Shape) / D, 1, 1}, rowBlock(D), kernels.RMSNormArgs{
		X: x.Addr, Y: out[0].Addr, W: w.W, Rows: int32(prod(x.Shape) / D), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerL2Norm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	D := x.Shape[len(x.Shape)-1]
	return newKernel(kernels.KernelL2Norm, [3]int{prod(x.Shape) / D, 1, 1}, rowBlock(D), kernels.L2NormArgs{
		X: x.Addr, Y: out[0].Addr, Rows: int32(prod(x.Shape) / D), D: int32(D),
		Eps: float32(d.Attrs.Float("eps")), Scale: float32(d.Attrs.Float("scale")), RowsPerOuter: 1, OuterStride: int32(D)})
}

func lowerGatedRMSNorm(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, z, w := in[0], in[1], in[2]
	D := x.Shape[len(x.Shape)-1]
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	return newKernel(kernels.KernelGatedRMSNorm, [3]int{prod(x.Shape) / D, 1, 1}, rowBlock(D), kernels.GatedRMSNormArgs{
		X: x.Addr, Z: z.Addr, Y: out[0].Addr, W: w.W, Rows: int32(prod(x.Shape) / D), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerRoPE(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	if err := wantRank(d, x, "x", 3); err != nil {
		return nil, err
	}
	T, heads, D := x.Shape[0], x.Shape[1], x.Shape[2]
	dims := d.Attrs.Int("dims")
	if dims%2 != 0 || dims > D || dims <= 0 {
		return nil, fmt.Errorf("rope: dims %d must be even and within the head dim %d", dims, D)
	}
	return newKernel(kernels.KernelRoPE, [3]int{T * heads, 1, 1}, rowBlock(max(dims/2, D-dims)), kernels.RoPEArgs{
		X: x.Addr, Y: out[0].Addr, Steps: c.steps, T: int32(T), Heads: int32(heads), D: int32(D), Dims: int32(dims),
		Theta: float32(d.Attrs.Float("theta")), XRow: int32(D)})
}

func lowerKVAppend(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	cache, x := in[0], in[1]
	if err := wantRank(d, cache, "cache", 3); err != nil {
		return nil, err
	}
	dt, err := stateCode(d, cache)
	if err != nil {
		return nil, err
	}
	T, row := x.Shape[0], cache.Shape[1]*cache.Shape[2]
	return newKernel(kernels.KernelKVAppend, elementGrid(T*row), 256, kernels.KVAppendArgs{
		Cache: out[0].Addr, X: x.Addr, Steps: c.steps, T: int32(T), Row: int32(row), CacheDType: dt})
}

// stateCode is the DT_* code of a KV cache or conv state (f32 or bf16).
func stateCode(d *plan.Dispatch, o Operand) (int32, error) {
	if o.DType != graph.F32 && o.DType != graph.BF16 {
		return 0, fmt.Errorf("%s: state dtype %s (want f32 or bf16)", d.Op, o.DType)
	}
	return DTypeCode(o.DType)
}

// attentionArgs checks q [T, NH, D] and the caches [N, KVH, D] and fills the args every
// attention kernel takes.
func attentionArgs(c *ctx, d *plan.Dispatch, in []Operand) (kernels.AttentionArgs, error) {
	q, k, v := in[0], in[1], in[2]
	if err := wantRank(d, q, "q", 3); err != nil {
		return kernels.AttentionArgs{}, err
	}
	if err := wantRank(d, k, "k_cache", 3); err != nil {
		return kernels.AttentionArgs{}, err
	}
	T, NH, D := q.Shape[0], q.Shape[1], q.Shape[2]
	if D%32 != 0 || D > kernels.AttnMaxD {
		return kernels.AttentionArgs{}, fmt.Errorf("%s: head dim %d must be a multiple of 32 and at most %d", d.Op, D, kernels.AttnMaxD)
	}
	if k.DType != v.DType {
		return kernels.AttentionArgs{}, fmt.Errorf("%s: k cache %s and v cache %s differ in dtype", d.Op, k.DType, v.DType)
	}
	dt, err := stateCode(d, k)
	if err != nil {
		return kernels.AttentionArgs{}, err
	}
	if T > 65535 {
		return kernels.AttentionArgs{}, fmt.Errorf("%s: %d tokens exceed the grid", d.Op, T)
	}
	return kernels.AttentionArgs{Q: q.Addr, K: k.Addr, V: v.Addr, Steps: c.steps, T: int32(T), NH: int32(NH),
		KVH: int32(k.Shape[1]), D: int32(D), CacheDType: dt, Scale: float32(d.Attrs.Float("scale")), Splits: 1}, nil
}

// gqaKernel says whether attention_gqa serves NH query heads over KVH kv heads: one
// SIMD group per query head of a kv head.
func gqaKernel(NH, KVH int) bool { return KVH > 0 && NH%KVH == 0 && NH/KVH <= kernels.AttnSIMDs }

func lowerAttention(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	args, err := attentionArgs(c, d, in)
	if err != nil {
		return nil, err
	}
	args.O = out[0].Addr
	if d.Attrs.Int(AttrPrefillTiled) != 0 && prefillKernel(int(args.T), int(args.NH), int(args.KVH)) {
		return prefillAttentionLaunch(c, d, args)
	}
	if d.Attrs.Bool(AttrMMAAttention) {
		return nil, fmt.Errorf("%s: marked %s without the tiled prefill attention it replaces (%d tokens, %d query heads over %d kv heads)", d.Op, AttrMMAAttention, args.T, args.NH, args.KVH)
	}
	if !gqaKernel(int(args.NH), int(args.KVH)) {
		if d.Attrs.Bool(AttrMMADecodeAttention) {
			return nil, fmt.Errorf("%s: marked %s, which serves up to %d query heads per kv head (%d over %d)", d.Op, AttrMMADecodeAttention, kernels.AttnGQAMMAHeads, args.NH, args.KVH)
		}
		return newKernel(kernels.KernelAttention, [3]int{int(args.NH), int(args.T), 1}, 256, args)
	}
	return gqaAttentionLaunch(c, d, args, 1)
}

// AttrMMADecodeAttention (bool) runs an untiled attention (decode's, whole or split into
// key ranges) on the tensor cores, attention_gqa_mma (the mma-decode-attention pass;
// MMADecodeAttentionShape).
const AttrMMADecodeAttention = "mma_decode_attention"

// MMADecodeAttentionShape says whether attention_gqa_mma serves an attention or
// attention_partial dispatch of these operands (q, k cache, v cache, ...) that is not
// tiled for prefill: a target with tensor cores, up to kernels.AttnGQAMMAHeads query
// heads per kv head, head dims a multiple of 32 up to kernels.AttnMaxD, a float32 or
// bf16 cache.
func (t *Target) MMADecodeAttentionShape(op string, in []Operand) bool {
	if !t.TensorCores || (op != "attention" && op != "attention_partial") || len(in) < 3 {
		return false
	}
	q, k, v := in[0], in[1], in[2]
	if len(q.Shape) != 3 || len(k.Shape) != 3 || k.DType != v.DType || (k.DType != graph.F32 && k.DType != graph.BF16) {
		return false
	}
	return mmaDecodeAttentionShape(t, q.Shape[1], k.Shape[1], q.Shape[2])
}

func mmaDecodeAttentionShape(t *Target, NH, KVH, D int) bool {
	return t.TensorCores && gqaKernel(NH, KVH) && NH/KVH <= kernels.AttnGQAMMAHeads && D%32 == 0 && D <= kernels.AttnMaxD
}

// AttrStagedDecodeAttention (bool) runs a decode step's attention marked
// AttrMMADecodeAttention on attention_gqa_staged: the same grid, group and outputs, its
// key tiles copied into group memory four ahead (the staged-decode-attention pass;
// StagedDecodeAttentionShape).
const AttrStagedDecodeAttention = "staged_decode_attention"

// StagedDecodeAttentionShape says whether attention_gqa_staged serves attention over T
// tokens of NH query heads of head dim D, over KVH kv heads of a cache of this dtype: one
// token (the rows before the step's own are read before the programmatic-launch wait)
// on attention_gqa_mma's shapes.
func (t *Target) StagedDecodeAttentionShape(T, NH, KVH, D int, cache graph.DType) bool {
	return T == 1 && (cache == graph.F32 || cache == graph.BF16) && mmaDecodeAttentionShape(t, NH, KVH, D)
}

// gqaAttentionLaunch is attention_gqa's launch (grid kv heads x tokens x key ranges), on
// the tensor cores when the dispatch is marked AttrMMADecodeAttention (attention_gqa_mma
// takes the same grid and writes the same outputs, in groups of D threads: a warp per 32
// head dims), staged when it is also marked AttrStagedDecodeAttention.
func gqaAttentionLaunch(c *ctx, d *plan.Dispatch, args kernels.AttentionArgs, splits int) (*Launch, error) {
	grid := [3]int{int(args.KVH), int(args.T), splits}
	staged := d.Attrs.Bool(AttrStagedDecodeAttention)
	if !d.Attrs.Bool(AttrMMADecodeAttention) {
		if staged {
			return nil, fmt.Errorf("%s: marked %s without %s, whose kernel it stages", d.Op, AttrStagedDecodeAttention, AttrMMADecodeAttention)
		}
		return newKernel(kernels.KernelAttentionGQA, grid, 256, args)
	}
	if !mmaDecodeAttentionShape(c.t, int(args.NH), int(args.KVH), int(args.D)) {
		return nil, fmt.Errorf("%s: marked %s, which needs tensor cores, up to %d query heads per kv head and head dims a multiple of 32 (target %s, %d query heads over %d kv heads, head dim %d)",
			d.Op, AttrMMADecodeAttention, kernels.AttnGQAMMAHeads, c.t.Name, args.NH, args.KVH, args.D)
	}
	if staged {
		if args.T != 1 {
			return nil, fmt.Errorf("%s: marked %s, which serves one token a step (its early copies are the rows before the step's), not %d", d.Op, AttrStagedDecodeAttention, args.T)
		}
		return newKernel(kernels.KernelAttentionGQAStaged, grid, int(args.D), args)
	}
	return newKernel(kernels.KernelAttentionGQAMMA, grid, int(args.D), args) // a warp per 32 head dims
}

// AttrMMAAttention (bool) runs a tiled prefill attention (AttrPrefillTiled) on the
// tensor cores, attention_prefill_mma (the mma-attention pass; MMAAttentionShape).
const AttrMMAAttention = "mma_attention"

// MMAAttentionShape says whether attention_prefill_mma serves an attention or
// attention_partial dispatch of these operands (q, k cache, v cache, ...) once it is
// tiled (AttrPrefillTiled): a target with tensor cores, more than one token, a float32 or
// bf16 cache and head dims of 32, 64, 128 or 256 (a warp per 32 dims, and a row's 16 keys
// shared evenly among D/16 owner threads).
func (t *Target) MMAAttentionShape(op string, in []Operand) bool {
	if !t.TensorCores || (op != "attention" && op != "attention_partial") || len(in) < 3 {
		return false
	}
	q, k, v := in[0], in[1], in[2]
	if len(q.Shape) != 3 || len(k.Shape) != 3 || k.DType != v.DType || (k.DType != graph.F32 && k.DType != graph.BF16) {
		return false
	}
	return mmaAttentionShape(t, q.Shape[0], q.Shape[1], k.Shape[1], q.Shape[2])
}

func mmaAttentionShape(t *Target, T, NH, KVH, D int) bool {
	return t.TensorCores && t.TiledPrefillAttention(T, NH, KVH, D) && D%32 == 0 && kernels.AttnMaxD%D == 0
}

// prefillAttentionLaunch is attention_prefill's launch (grid kv heads x query tiles x
// key ranges), on the tensor cores when the dispatch is marked AttrMMAAttention
// (attention_prefill_mma takes the same tile of queries, so the grid is the same, in
// groups of kernels.AttnMMAHalves·D threads: a warp per 32 head dims and half the rows),
// and with whole rows a warp when it is also marked AttrFA2Attention
// (attention_prefill_fa2: tiles of kernels.AttnFA2Rows query rows, the same key ranges).
func prefillAttentionLaunch(c *ctx, d *plan.Dispatch, args kernels.AttentionArgs) (*Launch, error) {
	grid := [3]int{int(args.KVH), ceilDiv(int(args.T), PrefillQueryTile(int(args.NH), int(args.KVH))), int(args.Splits)}
	fa2 := d.Attrs.Bool(AttrFA2Attention)
	if !d.Attrs.Bool(AttrMMAAttention) {
		if fa2 {
			return nil, fmt.Errorf("%s: marked %s without %s, whose kernel it replaces", d.Op, AttrFA2Attention, AttrMMAAttention)
		}
		return newKernel(kernels.KernelAttentionPrefill, grid, 256, args)
	}
	if !mmaAttentionShape(c.t, int(args.T), int(args.NH), int(args.KVH), int(args.D)) {
		return nil, fmt.Errorf("%s: marked %s, which needs tensor cores and head dims of 32, 64, 128 or 256 (target %s, head dim %d)",
			d.Op, AttrMMAAttention, c.t.Name, args.D)
	}
	if fa2 {
		if args.CacheDType != kernels.DTBF16 || !fa2AttentionShape(int(args.D)) {
			return nil, fmt.Errorf("%s: marked %s, which needs a bf16 cache and head dims of 64, 128 or 256 (cache type code %d, head dim %d)",
				d.Op, AttrFA2Attention, args.CacheDType, args.D)
		}
		grid[1] = ceilDiv(int(args.T), FA2QueryTile(int(args.NH), int(args.KVH)))
		return newKernel(kernels.KernelAttentionPrefillFA2, grid, kernels.AttnFA2Threads, args)
	}
	return newKernel(kernels.KernelAttentionPrefillMMA, grid, kernels.AttnMMAHalves*int(args.D), args)
}

// AttrFA2Attention (bool) runs a prefill attention marked AttrMMAAttention over a bf16
// cache on attention_prefill_fa2: each warp owns 16 query rows whole, FlashAttention-2's
// form (the fa2-attention pass; FA2AttentionShape).
const AttrFA2Attention = "fa2_attention"

// FA2AttentionShape says whether attention_prefill_fa2 serves an attention or
// attention_partial dispatch of these operands (q, k cache, v cache, ...) that
// attention_prefill_mma serves (MMAAttentionShape): a bf16 cache and head dims of 64,
// 128 or 256.
func (t *Target) FA2AttentionShape(op string, in []Operand) bool {
	return t.MMAAttentionShape(op, in) && in[1].DType == graph.BF16 && fa2AttentionShape(in[0].Shape[2])
}

func fa2AttentionShape(D int) bool { return D == 64 || D == 128 || D == 256 }

// FA2QueryTile is how many tokens one group of attention_prefill_fa2 takes: its
// kernels.AttnFA2Rows rows are every query head of the kv head for each token.
func FA2QueryTile(NH, KVH int) int { return kernels.AttnFA2Rows / (NH / KVH) }

// FA2AttentionSplits is PrefillAttentionSplits for attention_prefill_fa2, whose group
// takes a whole multiprocessor (its group memory) and four times attention_prefill_mma's
// rows: the keys are cut only when the (kv head, query tile) pairs leave multiprocessors
// idle (ParallelGroups counts two groups a multiprocessor), an agent's short turn on a
// long context; a chunk of 1,024 tokens of the model (128 pairs) stays whole.
func (t *Target) FA2AttentionSplits(T, NH, KVH, D int) int {
	if !t.TiledPrefillAttention(T, NH, KVH, D) || !fa2AttentionShape(D) {
		return 1
	}
	groups, sms := ceilDiv(T, FA2QueryTile(NH, KVH))*KVH, t.ParallelGroups/2
	if groups >= sms*3/4 {
		return 1
	}
	return min(kernels.AttnMaxSplits, ceilDiv(sms, groups))
}

// AttrPrefillTiled is the attention attr (an int, 1) with which the compiler's
// tile-attention pass asks for attention_prefill; without it, or where the kernel does
// not apply, attention runs one group per (kv head, token) as before.
const AttrPrefillTiled = "prefill_tiled"

// prefillKernel says whether attention_prefill serves a step of T tokens over NH query
// heads and KVH kv heads: more than one token (decode keeps attention_gqa and its key
// split), and query heads per kv head a divisor of the kernel's SIMD groups, each SIMD
// group serving one of them.
func prefillKernel(T, NH, KVH int) bool {
	return T > 1 && KVH > 0 && NH%KVH == 0 && kernels.AttnSIMDs%(NH/KVH) == 0
}

// PrefillQueryTile is how many tokens one group of attention_prefill takes: every SIMD
// group serves kernels.AttnPrefillRows tokens of one query head of the kv head.
func PrefillQueryTile(NH, KVH int) int {
	return kernels.AttnPrefillRows * kernels.AttnSIMDs / (NH / KVH)
}

// TiledPrefillAttention says whether attention over T tokens of NH query heads of head
// dim D, over KVH kv heads, runs as attention_prefill when the plan asks for it.
func (t *Target) TiledPrefillAttention(T, NH, KVH, D int) bool {
	return prefillKernel(T, NH, KVH) && D%32 == 0 && D <= kernels.AttnMaxD
}

// AttentionSplits is how many key ranges attention over T tokens of NH query heads and
// KVH kv heads is split into: enough (kv head, token, range) groups to fill the GPU
// twice over when the tokens are few (decode), at most kernels.AttnMaxSplits; 1 when the
// step has groups enough or the split kernel does not apply.
func (t *Target) AttentionSplits(T, NH, KVH, D int) int {
	if !gqaKernel(NH, KVH) || D%32 != 0 || D > kernels.AttnMaxD {
		return 1
	}
	return t.splitsFor(T * KVH)
}

// splitsFor is how many key ranges give groups (kv head, query) pairs enough groups to
// fill the GPU twice over.
func (t *Target) splitsFor(groups int) int {
	if groups >= t.ParallelGroups {
		return 1
	}
	return min(kernels.AttnMaxSplits, ceilDiv(t.ParallelGroups, groups))
}

// PrefillAttentionSplits is AttentionSplits for attention_prefill, whose groups are (kv
// head, query tile) pairs: a step of a few hundred tokens (an agent's turn on a long
// context) has too few tiles to fill the GPU without cutting the keys.
func (t *Target) PrefillAttentionSplits(T, NH, KVH, D int) int {
	if !t.TiledPrefillAttention(T, NH, KVH, D) {
		return 1
	}
	return t.splitsFor(ceilDiv(T, PrefillQueryTile(NH, KVH)) * KVH)
}

// lowerAttentionPartial: attention_gqa (attention_prefill where the plan asks for it and
// the step has more than one token) over one key range per group, writing each range's
// partial softmax state (max, sum, unnormalised output) for attention_merge.
func lowerAttentionPartial(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	args, err := attentionArgs(c, d, in)
	if err != nil {
		return nil, err
	}
	splits := d.Attrs.Int("splits")
	blocks, err := blockSplit(d, splits)
	if err != nil {
		return nil, err
	}
	most := kernels.AttnMaxSplits
	if blocks.from > 0 {
		most = kernels.AttnMaxRanges
	}
	if !gqaKernel(int(args.NH), int(args.KVH)) || splits < 2 || splits > most {
		return nil, fmt.Errorf("attention_partial: %d query heads over %d kv heads in %d ranges: the split kernel serves up to %d query heads per kv head and 2..%d ranges",
			args.NH, args.KVH, splits, kernels.AttnSIMDs, most)
	}
	if d.Attrs.Int("key_block") != kernels.AttnKeyBlock {
		return nil, fmt.Errorf("attention_partial: key ranges in blocks of %d keys; the kernel's are %d", d.Attrs.Int("key_block"), kernels.AttnKeyBlock)
	}
	args.Splits, args.Work = int32(splits), out[0].Addr
	args.BlockFrom, args.BlockKeys, args.ShortSplits = blocks.from, blocks.keys, blocks.short
	if d.Attrs.Int(AttrPrefillTiled) != 0 && prefillKernel(int(args.T), int(args.NH), int(args.KVH)) {
		if blocks.from > 0 {
			return nil, fmt.Errorf("attention_partial: fixed-block key ranges (block_from %d) are attention_gqa's; attention_prefill cuts equal ranges", blocks.from)
		}
		return prefillAttentionLaunch(c, d, args)
	}
	if d.Attrs.Bool(AttrMMAAttention) {
		return nil, fmt.Errorf("%s: marked %s without the tiled prefill attention it replaces (%d tokens, %d query heads over %d kv heads)", d.Op, AttrMMAAttention, args.T, args.NH, args.KVH)
	}
	return gqaAttentionLaunch(c, d, args, splits)
}

// lowerAttentionMerge: one group per (token, query head) merges its ranges.
func lowerAttentionMerge(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	part, o := in[0], out[0]
	if err := wantRank(d, part, "partials", 4); err != nil {
		return nil, err
	}
	T, NH, S, W := part.Shape[0], part.Shape[1], part.Shape[2], part.Shape[3]
	D := o.Shape[len(o.Shape)-1]
	blocks, err := blockSplit(d, S)
	if err != nil {
		return nil, err
	}
	most := kernels.AttnMaxSplits
	if blocks.from > 0 {
		most = kernels.AttnMaxRanges
	}
	if W != D+2 || S > most || D%32 != 0 || D > kernels.AttnMaxD {
		return nil, fmt.Errorf("attention_merge: partials %v for head dim %d (want [T, NH, S <= %d, D+2], D a multiple of 32 up to %d)", part.Shape, D, most, kernels.AttnMaxD)
	}
	rows := T * NH
	return newKernel(kernels.KernelAttentionMerge, [3]int{rows, 1, 1}, 256, kernels.AttentionMergeArgs{
		Work: part.Addr, O: o.Addr, Steps: c.steps, Rows: int32(rows), D: int32(D), Splits: int32(S), NH: int32(NH),
		BlockFrom: blocks.from, BlockKeys: blocks.keys, ShortSplits: blocks.short})
}

// BlockSplitKeys is the keys of each range of decode attention's fixed-block split (the
// split-attention pass's choice from a context of Config.KeyBlockSplitFrom keys on): 512
// KB of a float32 kv head's K and V rows of 256 dims per group, and the grid's
// kernels.AttnMaxRanges ranges cover 128K keys before a range grows.
const BlockSplitKeys = 256

// keyBlocks is the fixed-block rule of a split's kernels (the BlockFrom, BlockKeys and
// ShortSplits of their args); from 0: equal ranges.
type keyBlocks struct{ from, keys, short int32 }

// blockSplit reads the fixed-block rule of attention_partial and attention_merge
// (ops.KeyRanges' attrs; none without it) and checks it against splits ranges.
func blockSplit(d *plan.Dispatch, splits int) (keyBlocks, error) {
	from, keys, short := d.Attrs.Int("block_from"), d.Attrs.Int("block_keys"), d.Attrs.Int("short_splits")
	if from == 0 {
		return keyBlocks{}, nil
	}
	if from < 0 || keys < kernels.AttnKeyBlock || keys%kernels.AttnKeyBlock != 0 || short < 1 || short > min(splits, kernels.AttnMaxSplits) {
		return keyBlocks{}, fmt.Errorf("%s: block_from %d, block_keys %d, short_splits %d: want block_keys a multiple of %d and short_splits 1..%d",
			d.Op, from, keys, short, kernels.AttnKeyBlock, min(splits, kernels.AttnMaxSplits))
	}
	return keyBlocks{from: int32(from), keys: int32(keys), short: int32(short)}, nil
}

func lowerConv1D(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x, st, w := in[0], in[1], in[2]
	if err := wantRank(d, w, "weight", 2); err != nil {
		return nil, err
	}
	T, Ch, K := x.Shape[0], x.Shape[1], w.Shape[1]
	if K < 1 || K > kernels.ConvMaxK {
		return nil, fmt.Errorf("conv1d: kernel size %d outside [1, %d]", K, kernels.ConvMaxK)
	}
	dt, err := stateCode(d, st)
	if err != nil {
		return nil, err
	}
	groups, threads, slices := kernels.Conv1DGeometry(T, Ch)
	return newKernel(kernels.KernelConv1D, [3]int{groups, 1, 1}, threads, kernels.Conv1DArgs{
		X: x.Addr, State: out[1].Addr, Y: out[0].Addr, W: w.W, T: int32(T), Ch: int32(Ch), K: int32(K), StateDType: dt, Slices: slices})
}

// AttrChunkedDelta (bool) runs a gated_delta dispatch of a prefill step in chunks
// (gated_delta_chunked: the chunked-delta pass sets it) on a target whose ChunkedDelta
// is set, whatever the graph's form: both forms compute the same rule, the chunked one
// with a chain of T / DeltaChunk chunk steps instead of T token steps.
const AttrChunkedDelta = "chunked_delta"

func lowerGatedDelta(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	q, v := in[0], in[2]
	T, Hk, Dk := q.Shape[0], q.Shape[1], q.Shape[2]
	Hv, Dv := v.Shape[1], v.Shape[2]
	if Hv > 65535 {
		return nil, fmt.Errorf("gated_delta: %d value heads exceed the grid", Hv)
	}
	args := kernels.GatedDeltaArgs{
		Q: q.Addr, K: in[1].Addr, V: v.Addr, G: in[3].Addr, Beta: in[4].Addr, S: out[1].Addr, O: out[0].Addr,
		T: int32(T), Hk: int32(Hk), Hv: int32(Hv), Dk: int32(Dk), Dv: int32(Dv)}
	form := d.Attrs.String("form")
	if form == "chunked" || d.Attrs.Bool(AttrChunkedDelta) {
		if !c.t.ChunkedDelta {
			return nil, fmt.Errorf("gated_delta: target %s has no chunked kernel (compile with DeltaRule recurrent, or without the chunked-delta pass)", c.t.Name)
		}
		if form == "chunked" && d.Attrs.Int("chunk") != kernels.DeltaChunk {
			return nil, fmt.Errorf("gated_delta: chunks of %d tokens; gated_delta_chunked takes %d", d.Attrs.Int("chunk"), kernels.DeltaChunk)
		}
		if !ChunkedDeltaShape(Dk) {
			return nil, fmt.Errorf("gated_delta: key dim %d: gated_delta_chunked takes a multiple of 4 up to %d", Dk, kernels.DeltaMaxDk)
		}
		if q.Addr%16 != 0 || in[1].Addr%16 != 0 {
			return nil, fmt.Errorf("gated_delta: q and k must start 16-byte aligned for gated_delta_chunked (at %#x and %#x)", q.Addr, in[1].Addr)
		}
		return newKernel(kernels.KernelGatedDeltaChunked, [3]int{ceilDiv(Dv, kernels.DeltaChunkColumns), Hv, 1}, kernels.DeltaChunkThreads, args)
	}
	if form != "" && form != "recurrent" {
		return nil, fmt.Errorf("gated_delta: form %q has no kernel (recurrent or chunked)", form)
	}
	if Dk%kernels.DeltaLanes != 0 || Dk > kernels.DeltaMaxDk {
		return nil, fmt.Errorf("gated_delta: key dim %d must be a multiple of %d and at most %d", Dk, kernels.DeltaLanes, kernels.DeltaMaxDk)
	}
	return newKernel(kernels.KernelGatedDelta, [3]int{ceilDiv(Dv, 32/kernels.DeltaLanes), Hv, 1}, 32, args)
}

// ChunkedDeltaShape says gated_delta_chunked takes key heads of Dk: whole 16-byte rows
// that fit its group memory.
func ChunkedDeltaShape(Dk int) bool { return Dk%4 == 0 && Dk > 0 && Dk <= kernels.DeltaMaxDk }

func lowerUnary(op int32) lowering {
	return func(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
		dt, err := denseCode(d, in[0], "x")
		if err != nil {
			return nil, err
		}
		n := prod(out[0].Shape)
		return newKernel(kernels.KernelUnary, elementGrid(n), 256, kernels.UnaryArgs{
			X: in[0].Addr, Y: out[0].Addr, N: int32(n), Op: op, XDType: dt})
	}
}

func lowerBinary(op int32) lowering {
	return func(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
		a, b := in[0], in[1]
		adt, err := denseCode(d, a, "a")
		if err != nil {
			return nil, err
		}
		bdt, err := denseCode(d, b, "b")
		if err != nil {
			return nil, err
		}
		shape, strides, err := broadcast(a.Shape, b.Shape)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Op, err)
		}
		n := prod(a.Shape)
		return newKernel(kernels.KernelBinary, elementGrid(n), 256, kernels.BinaryArgs{
			A: a.Addr, B: b.Addr, Y: out[0].Addr, N: int32(n), Op: op, ADType: adt, BDType: bdt, Shape: shape, BStride: strides})
	}
}

// broadcast right-aligns a's shape to MaxRank and gives b's element stride along each
// dim (0 where b broadcasts: a dim b lacks, or a dim of 1 in b).
func broadcast(a, b []int) (shape, strides [kernels.MaxRank]int32, err error) {
	if len(a) > kernels.MaxRank || len(b) > len(a) {
		return shape, strides, fmt.Errorf("shapes %v and %v: rank above %d or b wider than a", a, b, kernels.MaxRank)
	}
	off := kernels.MaxRank - len(a)
	for i := range shape {
		shape[i] = 1
	}
	for i, d := range a {
		shape[off+i] = int32(d)
	}
	bOff := len(a) - len(b)
	s := 1
	for i := len(b) - 1; i >= 0; i-- {
		ad := a[bOff+i]
		switch {
		case b[i] == ad:
			strides[off+bOff+i] = int32(s)
		case b[i] == 1:
		default:
			return shape, strides, fmt.Errorf("b %v does not broadcast to a %v", b, a)
		}
		s *= b[i]
	}
	return shape, strides, nil
}

func lowerSlice(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	if x.DType.Bits() != 32 {
		return nil, fmt.Errorf("slice: %s elements (the kernel copies 4-byte elements)", x.DType)
	}
	axis, start, end := d.Attrs.Int("axis"), d.Attrs.Int("start"), d.Attrs.Int("end")
	if axis < 0 || axis >= len(x.Shape) || start < 0 || end > x.Shape[axis] || start >= end {
		return nil, fmt.Errorf("slice: axis %d [%d, %d) outside shape %v", axis, start, end, x.Shape)
	}
	outer, inner := prod(x.Shape[:axis]), prod(x.Shape[axis+1:])
	return newKernel(kernels.KernelSlice, elementGrid(outer*(end-start)*inner), 256, kernels.SliceArgs{
		X: x.Addr, Y: out[0].Addr, Outer: int32(outer), N: int32(x.Shape[axis]), Start: int32(start), Len: int32(end - start), Inner: int32(inner)})
}

func lowerRouter(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	if err := wantRank(d, x, "logits", 2); err != nil {
		return nil, err
	}
	T, E, k := x.Shape[0], x.Shape[1], d.Attrs.Int("k")
	if E > kernels.RouterMaxE || k > kernels.RouterMaxK || k < 1 || k > E {
		return nil, fmt.Errorf("router: %d experts, top %d: the kernel takes at most %d experts and top %d", E, k, kernels.RouterMaxE, kernels.RouterMaxK)
	}
	return newKernel(kernels.KernelRouter, [3]int{ceilDiv(T, 4), 1, 1}, 128, kernels.RouterArgs{
		Logits: x.Addr, Weights: out[0].Addr, Ids: out[1].Addr, T: int32(T), E: int32(E), K: int32(k)})
}

func lowerCombine(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	y := in[0]
	if err := wantRank(d, y, "y", 3); err != nil {
		return nil, err
	}
	T, k, H := y.Shape[0], y.Shape[1], y.Shape[2]
	return newKernel(kernels.KernelMoECombine, elementGrid(T*H), 256, kernels.CombineArgs{
		Y: y.Addr, W: in[1].Addr, Out: out[0].Addr, T: int32(T), K: int32(k), H: int32(H)})
}

func lowerArgmax(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	x := in[0]
	V := x.Shape[len(x.Shape)-1]
	T := prod(x.Shape) / V
	return newKernel(kernels.KernelArgmax, [3]int{T, 1, 1}, 256, kernels.ArgmaxArgs{X: x.Addr, Out: out[0].Addr, T: int32(T), V: int32(V)})
}
