//go:build linux

package cuda

import (
	"fmt"
	"unsafe"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// operand is a dispatch argument or result resolved to device memory.
type operand struct {
	addr  uint64         // device address of the first element
	w     kernels.Weight // the operand as a weight (dense operands: Data = addr)
	dtype graph.DType
	shape []int
}

// lowerCtx is what lowerings need beyond the operands: the device and the address of
// the program's step-scalar buffer (kernels.StepArgs).
type lowerCtx struct {
	g     *device
	steps uint64
	// work returns zeroed device scratch private to the dispatch being lowered (the same
	// memory each time the dispatch is lowered again).
	work func(bytes int64) (uint64, error)
}

// lowering turns one dispatch into one kernel launch. Every dispatch is exactly one
// launch, so the plan's dependency edges are the CUDA graph's edges.
type lowering func(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error)

// lowerings is the op table of the CUDA backend.
var lowerings = map[string]lowering{
	"embed":          lowerEmbed,
	"dequant":        lowerDequant,
	"matmul":         lowerMatmul,
	"qmatmul":        lowerMatmul,
	"expert_matmul":  lowerExpert,
	"expert_qmatmul": lowerExpert,
	"rms_norm":       lowerRMSNorm,
	"l2_norm":        lowerL2Norm,
	"gated_rms_norm": lowerGatedRMSNorm,
	"rope":           lowerRoPE,
	"kv_append":      lowerKVAppend,
	"attention":      lowerAttention,
	"conv1d":         lowerConv1D,
	"gated_delta":    lowerGatedDelta,
	"neg":            lowerUnary(kernels.UnaryNeg),
	"exp":            lowerUnary(kernels.UnaryExp),
	"sigmoid":        lowerUnary(kernels.UnarySigmoid),
	"silu":           lowerUnary(kernels.UnarySiLU),
	"softplus":       lowerUnary(kernels.UnarySoftplus),
	"add":            lowerBinary(kernels.BinaryAdd),
	"mul":            lowerBinary(kernels.BinaryMul),
	"swiglu":         lowerBinary(kernels.BinarySwiGLU),
	"slice":          lowerSlice,
	"router":         lowerRouter,
	"moe_combine":    lowerCombine,
	"argmax":         lowerArgmax,
}

// unsupported names the ops of ops.Default that never become a CUDA launch, and why.
// An op added to the table later without a lowering is refused at Load by checkOps.
var unsupported = map[string]string{
	"input":    "a source: bound to the step buffer",
	"weight":   "a source: bound to the uploaded weight",
	"state":    "a source: bound to the session's state buffer",
	"reshape":  "a view: aliases its argument, no dispatch",
	"select":   "a view: aliases a tuple element, no dispatch",
	"last_row": "a view: aliases the last row, no dispatch",
}

// newKernel records a launch of kernel name with args (copied; the launch owns it).
func newKernel[A any](g *device, name string, grid [3]int, block int, args A) (*launch, error) {
	a := new(A)
	*a = args
	return g.newLaunch(name, grid, block, a, unsafe.Pointer(a))
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

func wantRank(d *plan.Dispatch, o operand, what string, rank int) error {
	if len(o.shape) != rank {
		return fmt.Errorf("%s: %s has shape %v, want rank %d", d.Op, what, o.shape, rank)
	}
	return nil
}

// denseCode is the DT_* code of a dense (non-quantized) operand.
func denseCode(d *plan.Dispatch, o operand, what string) (int32, error) {
	switch o.dtype {
	case graph.F32, graph.BF16, graph.F16:
		return dtypeCode(o.dtype)
	}
	return 0, fmt.Errorf("%s: %s is %s; the kernel reads f32, bf16 or f16", d.Op, what, o.dtype)
}

func lowerEmbed(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	table, ids := in[0], in[1]
	if err := wantRank(d, table, "table", 2); err != nil {
		return nil, err
	}
	T := prod(ids.shape)
	return newKernel(c.g, kernels.KernelEmbed, [3]int{T, 1, 1}, rowBlock(table.shape[1]), kernels.EmbedArgs{
		W: table.w, Ids: ids.addr, Out: out[0].addr, T: int32(T), Cols: int32(table.shape[1]), Vocab: int32(table.shape[0])})
}

func lowerDequant(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	w := in[0]
	cols := w.shape[len(w.shape)-1]
	rows := prod(w.shape) / cols
	return newKernel(c.g, kernels.KernelDequant, elementGrid(rows*cols), 256, kernels.DequantArgs{
		W: w.w, Out: out[0].addr, Rows: int32(rows), Cols: int32(cols)})
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

func lowerMatmul(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x, w := in[0], in[1]
	if err := wantRank(d, w, "weight", 2); err != nil {
		return nil, err
	}
	M, K := w.shape[0], w.shape[1]
	rows := prod(x.shape) / K
	if err := checkWide(d, K, x.addr); err != nil {
		return nil, err
	}
	args := kernels.MatmulArgs{W: w.w, X: x.addr, Y: out[0].addr, Rows: int32(rows), M: int32(M), K: int32(K)}
	if rows == 1 && q4Matvec(w, K) {
		return newKernel(c.g, kernels.KernelMatvecQ4, matvecGrid(M, 1), 128, args)
	}
	if rows <= kernels.MatmulMaxRows || K%kernels.TileK != 0 {
		if rows > kernels.MatmulMaxRows {
			return nil, fmt.Errorf("%s: %d rows need the tiled kernel, which needs K %% %d == 0 (K = %d)", d.Op, rows, kernels.TileK, K)
		}
		return newKernel(c.g, kernels.KernelMatmulRows, [3]int{ceilDiv(M, 8), 1, 1}, 256, args)
	}
	return newKernel(c.g, kernels.KernelMatmulTiled, [3]int{ceilDiv(M, kernels.TileM), ceilDiv(rows, kernels.TileN), 1}, 256, args)
}

// q4Matvec says whether the 16-byte q4 matrix-vector kernels apply: 32-code chunks
// never straddle a quantization group.
func q4Matvec(w operand, K int) bool {
	return w.dtype == graph.Q4 && K%32 == 0 && w.w.Group%32 == 0
}

// expertTiledMinSlots is the routed-slot count from which experts are multiplied in
// gathered tiles instead of one SIMD group per (row, slot).
const expertTiledMinSlots = 64

func lowerExpert(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x, w, ids := in[0], in[1], in[2]
	if err := wantRank(d, w, "weight", 3); err != nil {
		return nil, err
	}
	if err := wantRank(d, ids, "ids", 2); err != nil {
		return nil, err
	}
	E, M, K := w.shape[0], w.shape[1], w.shape[2]
	T, topK := ids.shape[0], ids.shape[1]
	if err := checkWide(d, K, x.addr); err != nil {
		return nil, err
	}
	args := kernels.ExpertArgs{W: w.w, X: x.addr, Ids: ids.addr, Y: out[0].addr, T: int32(T), TopK: int32(topK),
		E: int32(E), M: int32(M), K: int32(K)}
	if len(x.shape) == 3 {
		args.XPerSlot = 1
	}
	slots := T * topK
	if slots < expertTiledMinSlots && q4Matvec(w, K) {
		return newKernel(c.g, kernels.KernelExpertMVQ4, matvecGrid(M, slots), 128, args)
	}
	if slots < expertTiledMinSlots || K%kernels.TileK != 0 {
		if slots > 65535 {
			return nil, fmt.Errorf("%s: %d routed slots exceed the grid", d.Op, slots)
		}
		return newKernel(c.g, kernels.KernelExpertRows, [3]int{ceilDiv(M, 8), slots, 1}, 256, args)
	}
	return newKernel(c.g, kernels.KernelExpertTiled, [3]int{ceilDiv(M, kernels.ExpertTileM), E, 1}, 256, args)
}

func lowerRMSNorm(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x, w := in[0], in[1]
	D := x.shape[len(x.shape)-1]
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	return newKernel(c.g, kernels.KernelRMSNorm, [3]int{prod(x.shape) / D, 1, 1}, rowBlock(D), kernels.RMSNormArgs{
		X: x.addr, Y: out[0].addr, W: w.w, Rows: int32(prod(x.shape) / D), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerL2Norm(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x := in[0]
	D := x.shape[len(x.shape)-1]
	return newKernel(c.g, kernels.KernelL2Norm, [3]int{prod(x.shape) / D, 1, 1}, rowBlock(D), kernels.L2NormArgs{
		X: x.addr, Y: out[0].addr, Rows: int32(prod(x.shape) / D), D: int32(D),
		Eps: float32(d.Attrs.Float("eps")), Scale: float32(d.Attrs.Float("scale")), RowsPerOuter: 1, OuterStride: int32(D)})
}

func lowerGatedRMSNorm(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x, z, w := in[0], in[1], in[2]
	D := x.shape[len(x.shape)-1]
	if _, err := denseCode(d, w, "weight"); err != nil {
		return nil, err
	}
	return newKernel(c.g, kernels.KernelGatedRMSNorm, [3]int{prod(x.shape) / D, 1, 1}, rowBlock(D), kernels.GatedRMSNormArgs{
		X: x.addr, Z: z.addr, Y: out[0].addr, W: w.w, Rows: int32(prod(x.shape) / D), D: int32(D), Eps: float32(d.Attrs.Float("eps"))})
}

func lowerRoPE(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x := in[0]
	if err := wantRank(d, x, "x", 3); err != nil {
		return nil, err
	}
	T, heads, D := x.shape[0], x.shape[1], x.shape[2]
	dims := d.Attrs.Int("dims")
	if dims%2 != 0 || dims > D || dims <= 0 {
		return nil, fmt.Errorf("rope: dims %d must be even and within the head dim %d", dims, D)
	}
	return newKernel(c.g, kernels.KernelRoPE, [3]int{T * heads, 1, 1}, rowBlock(max(dims/2, D-dims)), kernels.RoPEArgs{
		X: x.addr, Y: out[0].addr, Steps: c.steps, T: int32(T), Heads: int32(heads), D: int32(D), Dims: int32(dims),
		Theta: float32(d.Attrs.Float("theta"))})
}

func lowerKVAppend(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	cache, x := in[0], in[1]
	if err := wantRank(d, cache, "cache", 3); err != nil {
		return nil, err
	}
	dt, err := stateCode(d, cache)
	if err != nil {
		return nil, err
	}
	T, row := x.shape[0], cache.shape[1]*cache.shape[2]
	return newKernel(c.g, kernels.KernelKVAppend, elementGrid(T*row), 256, kernels.KVAppendArgs{
		Cache: out[0].addr, X: x.addr, Steps: c.steps, T: int32(T), Row: int32(row), CacheDType: dt})
}

// stateCode is the DT_* code of a KV cache or conv state (f32 or bf16).
func stateCode(d *plan.Dispatch, o operand) (int32, error) {
	if o.dtype != graph.F32 && o.dtype != graph.BF16 {
		return 0, fmt.Errorf("%s: state dtype %s (want f32 or bf16)", d.Op, o.dtype)
	}
	return dtypeCode(o.dtype)
}

func lowerAttention(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	q, k, v := in[0], in[1], in[2]
	if err := wantRank(d, q, "q", 3); err != nil {
		return nil, err
	}
	if err := wantRank(d, k, "k_cache", 3); err != nil {
		return nil, err
	}
	T, NH, D := q.shape[0], q.shape[1], q.shape[2]
	if D%32 != 0 || D > kernels.AttnMaxD {
		return nil, fmt.Errorf("attention: head dim %d must be a multiple of 32 and at most %d", D, kernels.AttnMaxD)
	}
	if k.dtype != v.dtype {
		return nil, fmt.Errorf("attention: k cache %s and v cache %s differ in dtype", k.dtype, v.dtype)
	}
	dt, err := stateCode(d, k)
	if err != nil {
		return nil, err
	}
	if T > 65535 {
		return nil, fmt.Errorf("attention: %d tokens exceed the grid", T)
	}
	KVH := k.shape[1]
	args := kernels.AttentionArgs{Q: q.addr, K: k.addr, V: v.addr, O: out[0].addr, Steps: c.steps, T: int32(T), NH: int32(NH),
		KVH: int32(KVH), D: int32(D), CacheDType: dt, Scale: float32(d.Attrs.Float("scale")), Splits: 1}
	if KVH == 0 || NH%KVH != 0 || NH/KVH > kernels.AttnSIMDs {
		return newKernel(c.g, kernels.KernelAttention, [3]int{NH, T, 1}, 256, args)
	}
	// Enough groups to fill the GPU twice over: split the keys when tokens × kv heads
	// are few (decode), at most 64 ways.
	if groups := T * KVH; groups < 2*c.g.sms {
		args.Splits = int32(min(kernels.AttnMaxSplits, ceilDiv(2*c.g.sms, groups)))
	}
	if args.Splits > 1 {
		work, err := c.work(4 * (int64(T*NH)*int64(args.Splits)*int64(D+2) + int64(T*KVH)))
		if err != nil {
			return nil, fmt.Errorf("attention workspace: %w", err)
		}
		args.Work = work
	}
	return newKernel(c.g, kernels.KernelAttentionGQA, [3]int{KVH, T, int(args.Splits)}, 256, args)
}

func lowerConv1D(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x, st, w := in[0], in[1], in[2]
	if err := wantRank(d, w, "weight", 2); err != nil {
		return nil, err
	}
	T, Ch, K := x.shape[0], x.shape[1], w.shape[1]
	if K < 1 || K > kernels.ConvMaxK {
		return nil, fmt.Errorf("conv1d: kernel size %d outside [1, %d]", K, kernels.ConvMaxK)
	}
	dt, err := stateCode(d, st)
	if err != nil {
		return nil, err
	}
	return newKernel(c.g, kernels.KernelConv1D, [3]int{ceilDiv(Ch, 128), 1, 1}, 128, kernels.Conv1DArgs{
		X: x.addr, State: out[1].addr, Y: out[0].addr, W: w.w, T: int32(T), Ch: int32(Ch), K: int32(K), StateDType: dt})
}

func lowerGatedDelta(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	if f := d.Attrs.String("form"); f != "" && f != "recurrent" {
		return nil, fmt.Errorf("gated_delta: form %q has no CUDA kernel (only recurrent; compile with DeltaRule recurrent)", f)
	}
	q, v := in[0], in[2]
	T, Hk, Dk := q.shape[0], q.shape[1], q.shape[2]
	Hv, Dv := v.shape[1], v.shape[2]
	if Dk%kernels.DeltaLanes != 0 || Dk > kernels.DeltaMaxDk {
		return nil, fmt.Errorf("gated_delta: key dim %d must be a multiple of %d and at most %d", Dk, kernels.DeltaLanes, kernels.DeltaMaxDk)
	}
	if Hv > 65535 {
		return nil, fmt.Errorf("gated_delta: %d value heads exceed the grid", Hv)
	}
	return newKernel(c.g, kernels.KernelGatedDelta, [3]int{ceilDiv(Dv, 32/kernels.DeltaLanes), Hv, 1}, 32, kernels.GatedDeltaArgs{
		Q: q.addr, K: in[1].addr, V: v.addr, G: in[3].addr, Beta: in[4].addr, S: out[1].addr, O: out[0].addr,
		T: int32(T), Hk: int32(Hk), Hv: int32(Hv), Dk: int32(Dk), Dv: int32(Dv)})
}

func lowerUnary(op int32) lowering {
	return func(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
		dt, err := denseCode(d, in[0], "x")
		if err != nil {
			return nil, err
		}
		n := prod(out[0].shape)
		return newKernel(c.g, kernels.KernelUnary, elementGrid(n), 256, kernels.UnaryArgs{
			X: in[0].addr, Y: out[0].addr, N: int32(n), Op: op, XDType: dt})
	}
}

func lowerBinary(op int32) lowering {
	return func(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
		a, b := in[0], in[1]
		adt, err := denseCode(d, a, "a")
		if err != nil {
			return nil, err
		}
		bdt, err := denseCode(d, b, "b")
		if err != nil {
			return nil, err
		}
		shape, strides, err := broadcast(a.shape, b.shape)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Op, err)
		}
		n := prod(a.shape)
		return newKernel(c.g, kernels.KernelBinary, elementGrid(n), 256, kernels.BinaryArgs{
			A: a.addr, B: b.addr, Y: out[0].addr, N: int32(n), Op: op, ADType: adt, BDType: bdt, Shape: shape, BStride: strides})
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

func lowerSlice(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x := in[0]
	if x.dtype.Bits() != 32 {
		return nil, fmt.Errorf("slice: %s elements (the kernel copies 4-byte elements)", x.dtype)
	}
	axis, start, end := d.Attrs.Int("axis"), d.Attrs.Int("start"), d.Attrs.Int("end")
	if axis < 0 || axis >= len(x.shape) || start < 0 || end > x.shape[axis] || start >= end {
		return nil, fmt.Errorf("slice: axis %d [%d, %d) outside shape %v", axis, start, end, x.shape)
	}
	outer, inner := prod(x.shape[:axis]), prod(x.shape[axis+1:])
	return newKernel(c.g, kernels.KernelSlice, elementGrid(outer*(end-start)*inner), 256, kernels.SliceArgs{
		X: x.addr, Y: out[0].addr, Outer: int32(outer), N: int32(x.shape[axis]), Start: int32(start), Len: int32(end - start), Inner: int32(inner)})
}

func lowerRouter(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x := in[0]
	if err := wantRank(d, x, "logits", 2); err != nil {
		return nil, err
	}
	T, E, k := x.shape[0], x.shape[1], d.Attrs.Int("k")
	if E > kernels.RouterMaxE || k > kernels.RouterMaxK || k < 1 || k > E {
		return nil, fmt.Errorf("router: %d experts, top %d: the kernel takes at most %d experts and top %d", E, k, kernels.RouterMaxE, kernels.RouterMaxK)
	}
	return newKernel(c.g, kernels.KernelRouter, [3]int{ceilDiv(T, 4), 1, 1}, 128, kernels.RouterArgs{
		Logits: x.addr, Weights: out[0].addr, Ids: out[1].addr, T: int32(T), E: int32(E), K: int32(k)})
}

func lowerCombine(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	y := in[0]
	if err := wantRank(d, y, "y", 3); err != nil {
		return nil, err
	}
	T, k, H := y.shape[0], y.shape[1], y.shape[2]
	return newKernel(c.g, kernels.KernelMoECombine, elementGrid(T*H), 256, kernels.CombineArgs{
		Y: y.addr, W: in[1].addr, Out: out[0].addr, T: int32(T), K: int32(k), H: int32(H)})
}

func lowerArgmax(c *lowerCtx, d *plan.Dispatch, in, out []operand) (*launch, error) {
	x := in[0]
	V := x.shape[len(x.shape)-1]
	T := prod(x.shape) / V
	return newKernel(c.g, kernels.KernelArgmax, [3]int{T, 1, 1}, 256, kernels.ArgmaxArgs{X: x.addr, Out: out[0].addr, T: int32(T), V: int32(V)})
}

// weightOf describes a dense buffer at addr with the Weight struct the kernels take.
func weightOf(addr uint64, code int32) kernels.Weight {
	return kernels.Weight{Data: addr, DType: code}
}
