package passes

import (
	"pistil/gpu"
	"pistil/ops/kernels"
	"pistil/plan"
)

// tensorCores marks, for a GPU target with tensor-core kernels, every matmul-family
// dispatch of a multi-token step whose shape would run on a SIMT tile
// (gpu.Target.TensorCoreShape) with gpu.AttrTensorCores, so select-kernels gives it the
// mma kernel. It runs on the plan, after the fused ops a backend expands (at T > 1 most
// of them) are dispatches of their own, so their matmuls are marked too; after the
// short-step passes, whose marks it leaves alone (expert-per-slot's routed experts of up
// to 512 slots, say). Off, those matmuls run on the portable SIMT kernels.
func tensorCores(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.TensorCores || u.Plan == nil || u.Plan.Tokens < 2 {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Attrs.Bool(gpu.AttrBatchedMatvec) || d.Attrs.Bool(gpu.AttrExpertPerSlot) {
			continue // a short-step pass gave it the kernel that wins at its size
		}
		in, _ := dispatchOperands(u.Plan, d)
		if !t.GPU.TensorCoreShape(d.Op, in) {
			continue
		}
		setAttr(d, gpu.AttrTensorCores, true)
		u.count("tensor-cores: "+d.Op, 1)
	}
	return nil
}

// mmaSplitK gives the tensor-core matmuls whose 64x64 tiles would not fill the GPU
// (gpu.Target.MMASplitKShape: short prefill steps, matmuls of few rows) the kernel that
// shares each tile's k-steps out among its warps, matmul_mma_splitk. Off, every marked
// matmul runs on matmul_mma.
func mmaSplitK(u *Unit) error {
	return markTensorCoreKernel(u, "mma-split-k", gpu.AttrMMASplitK, func(t *gpu.Target, d *plan.Dispatch, in []gpu.Operand) bool {
		return t.MMASplitKShape(d.Op, in)
	})
}

// splitKOnlyIdle takes matmul_mma_splitk back from the matmuls mma-split-k gave it whose
// tiles still give every multiprocessor a group (at least gpu.Target.ParallelGroups / 2,
// which counts two a multiprocessor), so mma-wide-rows gives them the wide tile: in a
// 512-token chunk of the full model the GDN and attention output projections and the
// shared experts' down projections, 256 tiles each (2,048 rows by 512 tokens). On the
// H100 the 128x32 wide tile, whose warps each walk all of K, ran those faster than the
// split tiles of 32x16 that share each tile's k-steps among four warps (the GDN output
// projection's split-k launch took 221 µs, the wide input projection of twice its
// products 227). Matmuls of fewer tiles (a 256-token chunk's output projections: 128)
// keep the split; that chunk's GDN z projections (256 tiles) move, unmeasured. Only with
// mma-wide-rows: the 64x64 tile was not measured against it.
func splitKOnlyIdle(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || u.Plan == nil || !u.passOn("mma-wide-rows") {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if !d.Attrs.Bool(gpu.AttrMMASplitK) {
			continue
		}
		if in, _ := dispatchOperands(u.Plan, d); gpu.MMATiles(in) >= t.GPU.ParallelGroups/2 {
			clearAttr(d, gpu.AttrMMASplitK)
			u.count("split-k-only-idle: "+d.Op, 1)
		}
	}
	return nil
}

// expertSplitK gives the tensor-core routed-expert matmuls whose experts receive at most
// 16 rows on average (gpu.Target.ExpertSplitKShape: prefill chunks of up to 512 tokens of
// the full model) the kernel that shares each tile's k-steps out among its warps,
// expert_mma_splitk, in tiles of 32 weight rows. Off, they run on expert_mma16.
func expertSplitK(u *Unit) error {
	return markTensorCoreKernel(u, "expert-split-k", gpu.AttrExpertSplitK, func(t *gpu.Target, d *plan.Dispatch, in []gpu.Operand) bool {
		return d.Attrs.Int(gpu.AttrExpertTile) <= kernels.MMASplitKTileN && t.ExpertSplitKShape(d.Op, in)
	})
}

// mmaWideRows gives the tensor-core dense matmuls (those mma-split-k left on matmul_mma)
// and the routed-expert matmuls in tiles of 32 routed rows the wide tiles: 128 weight rows
// per group, two row blocks a warp (matmul_mma_wide, expert_mma32w), so each activation
// fragment a warp loads feeds two mma and a k-step's staging serves half the tokens per
// mma. The same products per stored value.
func mmaWideRows(u *Unit) error {
	return markTensorCoreKernel(u, "mma-wide-rows", gpu.AttrMMAWideRows, func(_ *gpu.Target, d *plan.Dispatch, _ []gpu.Operand) bool {
		switch d.Op {
		case "expert_matmul", "expert_qmatmul":
			return d.Attrs.Int(gpu.AttrExpertTile) == kernels.MMAWideTileN && !d.Attrs.Bool(gpu.AttrExpertSplitK)
		}
		return !d.Attrs.Bool(gpu.AttrMMASplitK)
	})
}

// markTensorCoreKernel sets attr on the dispatches marked for the tensor cores that want
// it (a choice among their kernels), counting them under the pass's name.
func markTensorCoreKernel(u *Unit, pass, attr string, wants func(t *gpu.Target, d *plan.Dispatch, in []gpu.Operand) bool) error {
	return markKernelChoice(u, pass, gpu.AttrTensorCores, attr, wants)
}

// markKernelChoice sets attr on the dispatches already marked with marked (an earlier
// pass's choice) that want it, counting them under the pass's name: for a GPU target only.
func markKernelChoice(u *Unit, pass, marked, attr string, wants func(t *gpu.Target, d *plan.Dispatch, in []gpu.Operand) bool) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || u.Plan == nil {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if !d.Attrs.Bool(marked) {
			continue
		}
		if in, _ := dispatchOperands(u.Plan, d); wants(t.GPU, d, in) {
			setAttr(d, attr, true)
			u.count(pass+": "+d.Op, 1)
		}
	}
	return nil
}

// mmaMatvec marks, for a GPU target with tensor cores, every dispatch whose q4
// matrix-vector kernel has a tensor-core twin (gpu.Target.MMAMatvecShape: decode's
// projections and experts, and the one-row lm_head of a prefill) with
// gpu.AttrMMAMatvec, so select-kernels launches the twin (ops/kernels/matvec_mma.k).
// Off, they run on the portable SIMT matrix-vector kernels.
func mmaMatvec(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil {
		return err
	}
	return markUnclaimed(u, "mma-matvec", gpu.AttrMMAMatvec, t.GPU.MMAMatvecShape)
}

// immaMatvec marks every dispatch mma-matvec marked with gpu.AttrIMMAMatvec, so
// select-kernels launches the twin's integer form (kernels.IMMAMatvecTwin: the codes as
// u8 and the activations as three s8 parts per k-step in mma.m16n8k32.s32.u8.s8). Off,
// the twins multiply in bf16.
func immaMatvec(u *Unit) error {
	if u.Plan == nil {
		return nil
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Attrs.Bool(gpu.AttrMMAMatvec) {
			setAttr(d, gpu.AttrIMMAMatvec, true)
			u.count("imma-matvec: "+d.Op, 1)
		}
	}
	return nil
}

// stagedMatvec marks every dispatch mma-matvec marked, and imma-matvec did not, whose K
// a group's memory holds (gpu.Target.StagedMatvecShape) with gpu.AttrStagedMatvec, so
// select-kernels launches the twin's staged form (kernels.StagedMatvecTwin: each group
// copies its weight tile into group memory with cp.async, issued before the
// programmatic-launch wait where the router does not choose the tile). Off, each warp
// of the twins loads its own weights.
func stagedMatvec(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || u.Plan == nil {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if !d.Attrs.Bool(gpu.AttrMMAMatvec) || d.Attrs.Bool(gpu.AttrIMMAMatvec) {
			continue
		}
		if in, _ := dispatchOperands(u.Plan, d); t.GPU.StagedMatvecShape(d.Op, in) {
			setAttr(d, gpu.AttrStagedMatvec, true)
			u.count("staged-matvec: "+d.Op, 1)
		}
	}
	return nil
}

// mmaAttention marks, for a GPU target with tensor cores, every tiled prefill attention
// (tile-attention's gpu.AttrPrefillTiled, whole or split into key ranges) over a float32
// or bf16 cache with gpu.AttrMMAAttention, so select-kernels launches attention_prefill_mma
// (ops/kernels/attention_mma.k: both products on the tensor cores, in tf32 split in
// three so that it keeps float32's precision). Off, they run on the SIMT
// attention_prefill.
func mmaAttention(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.TensorCores || u.Plan == nil || u.Plan.Tokens < 2 {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Attrs.Int(gpu.AttrPrefillTiled) == 0 {
			continue
		}
		if in, _ := dispatchOperands(u.Plan, d); t.GPU.MMAAttentionShape(d.Op, in) {
			setAttr(d, gpu.AttrMMAAttention, true)
			u.count("mma-attention: "+d.Op, 1)
		}
	}
	return nil
}

// fa2Attention marks, for a GPU target with tensor cores, every prefill attention that
// mma-attention marked and that runs over a bf16 cache with head dims of 64, 128 or 256
// with gpu.AttrFA2Attention, so select-kernels launches attention_prefill_fa2
// (ops/kernels/attention_mma.k: each warp owns 16 query rows whole, FlashAttention-2's
// form, a group 128 rows; the same bf16 products and key ranges as attention_prefill_mma).
// Off, they keep attention_prefill_mma.
func fa2Attention(u *Unit) error {
	return markKernelChoice(u, "fa2-attention", gpu.AttrMMAAttention, gpu.AttrFA2Attention,
		func(t *gpu.Target, _ *plan.Dispatch, in []gpu.Operand) bool {
			return t.FA2AttentionShape("attention", in)
		})
}

// mmaDecodeAttention marks, for a GPU target with tensor cores, every attention that runs
// one group per (kv head, token, key range) rather than tiled for prefill (decode's,
// whole or split into key ranges) with gpu.AttrMMADecodeAttention, so select-kernels
// launches attention_gqa_mma (ops/kernels/attention_mma.k: the group's warps split the
// head dims, each loading its slice of every key tile straight from the cache into tf32
// mma fragments, split in three for float32's precision) instead of attention_gqa, whose
// SIMT dot products are bound by group memory at long contexts.
func mmaDecodeAttention(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.TensorCores || u.Plan == nil {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		in, _ := dispatchOperands(u.Plan, d)
		if !t.GPU.MMADecodeAttentionShape(d.Op, in) {
			continue
		}
		q, k := in[0], in[1]
		if d.Attrs.Int(gpu.AttrPrefillTiled) != 0 && t.GPU.TiledPrefillAttention(q.Shape[0], q.Shape[1], k.Shape[1], q.Shape[2]) {
			continue // attention_prefill's (or attention_prefill_mma's)
		}
		setAttr(d, gpu.AttrMMADecodeAttention, true)
		u.count("mma-decode-attention: "+d.Op, 1)
	}
	return nil
}

// stagedDecodeAttention marks, for a GPU target with tensor cores, every attention of one
// token that mma-decode-attention marked with gpu.AttrStagedDecodeAttention, so
// select-kernels launches attention_gqa_staged: the same products, the key tiles copied
// into group memory by cp.async four ahead, the rows earlier steps wrote copied before
// the programmatic-launch wait. split-attention gives these equal key ranges at every
// context (a group keeps four tiles of its range in flight), no fixed-block split. Off
// by default: on the H100 it was 1% faster at 4,096 keys and 3.7% slower at 32,768
// (cuda/README.md).
func stagedDecodeAttention(u *Unit) error {
	return markKernelChoice(u, "staged-decode-attention", gpu.AttrMMADecodeAttention, gpu.AttrStagedDecodeAttention,
		func(t *gpu.Target, _ *plan.Dispatch, in []gpu.Operand) bool {
			q, k := in[0], in[1]
			return t.StagedDecodeAttentionShape(q.Shape[0], q.Shape[1], k.Shape[1], q.Shape[2], k.DType)
		})
}

// expertTiles sizes the mma expert tiles by expert load: the height (routed rows per
// tile) that holds the rows an expert receives on average, T·k/E (gpu.ExpertTileFor).
// Off, every expert tile is 16 rows high.
func expertTiles(u *Unit) error {
	if u.Plan == nil {
		return nil
	}
	eachTensorCoreExpertMatmul(u, func(d *plan.Dispatch, slots, experts int) {
		setAttr(d, gpu.AttrExpertTile, int64(gpu.ExpertTileFor(slots, experts)))
		u.count("expert-tiles: "+d.Op, 1)
	})
	return nil
}

// eachTensorCoreExpertMatmul calls fn with every routed-expert matmul marked for the
// tensor cores, its routed slots (T·k) and its experts, skipping operands of the wrong
// rank (the lowering reports them).
func eachTensorCoreExpertMatmul(u *Unit, fn func(d *plan.Dispatch, slots, experts int)) {
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if !d.Attrs.Bool(gpu.AttrTensorCores) || (d.Op != "expert_matmul" && d.Op != "expert_qmatmul") {
			continue
		}
		in, _ := dispatchOperands(u.Plan, d)
		w, ids := in[1], in[2]
		if len(w.Shape) != 3 || len(ids.Shape) != 2 {
			continue
		}
		fn(d, ids.Shape[0]*ids.Shape[1], w.Shape[0])
	}
}

// busyExpertTileShare is the share of experts past which busy-expert-tiles grows a tile:
// one expert in ten running its 16-row tile twice.
const busyExpertTileShare = 0.1

// busyExpertTiles grows the mma expert tiles of 16 routed rows to the wide tile of 32
// (expert_mma32w, with mma-wide-rows) where more than one expert in ten would receive over
// 16 rows (gpu.ExpertRowsOverTile; from T·k/E of about 12.0: the full model's 512-token
// chunks, 16 on average, where 43% would), so those experts read their weights once, not
// twice; the wide tile multiplies an expert of at most 16 rows on two of its four token
// sub-tiles (MMA_PARTIAL_SUBTILES), the products of the 16-row tile. At 8 rows an expert
// (256-token chunks: 0.4% over 16) the 16-row tile stays, which measured faster there
// (its four groups a multiprocessor against the wide tile's three). Tiles expert-split-k
// took keep their 16 rows; without mma-wide-rows nothing grows (the narrow 32-row tile,
// expert_mma32, was not measured against it).
func busyExpertTiles(u *Unit) error {
	if u.Plan == nil || !u.passOn("mma-wide-rows") {
		return nil
	}
	eachTensorCoreExpertMatmul(u, func(d *plan.Dispatch, slots, experts int) {
		if d.Attrs.Bool(gpu.AttrExpertSplitK) || d.Attrs.Int(gpu.AttrExpertTile) != gpu.ExpertTiles[0] {
			return
		}
		if gpu.ExpertRowsOverTile(slots, experts, gpu.ExpertTiles[0]) > busyExpertTileShare {
			setAttr(d, gpu.AttrExpertTile, int64(kernels.MMAWideTileN))
			u.count("busy-expert-tiles: "+d.Op, 1)
		}
	})
	return nil
}

// Three kernel choices for the matmuls of short prefill steps (an agent's turn is cut
// into pieces of a few to a few hundred tokens), each a pass that marks the dispatches
// of a multi-token step whose shape it covers, so select-kernels picks its kernel:
//   - batched-matvec: q4 qmatmuls of 9..128 rows on matvec_q4_rows (gpu.BatchedMatvecShape);
//   - expert-gather: routed-expert q4 matmuls of at most 8 rows per expert on
//     expert_matvec_gather_q4 (gpu.ExpertGatherShape);
//   - expert-per-slot: routed-expert q4 matmuls of up to 512 slots on the decode's
//     per-slot expert_matvec_q4 (gpu.ExpertPerSlotShape).
//
// Off, those shapes run on the SIMT tiles (or the tensor cores, whose pass runs after
// these), which pay for staging a full tile however few rows arrive. Dispatches an
// earlier one of these marked keep their kernel.
func batchedMatvec(u *Unit) error {
	return markShortStep(u, "batched-matvec", gpu.AttrBatchedMatvec, gpu.BatchedMatvecShape)
}

func expertGather(u *Unit) error {
	return markShortStep(u, "expert-gather", gpu.AttrBatchedMatvec, gpu.ExpertGatherShape)
}

func expertPerSlot(u *Unit) error {
	return markShortStep(u, "expert-per-slot", gpu.AttrExpertPerSlot, gpu.ExpertPerSlotShape)
}

func markShortStep(u *Unit, pass, attr string, shape func(op string, in []gpu.Operand) bool) error {
	if u.Plan == nil || u.Plan.Tokens < 2 {
		return nil
	}
	return markUnclaimed(u, pass, attr, shape)
}

// markUnclaimed marks with attr, for a GPU target, every dispatch of the plan whose
// operands shape takes and that no earlier kernel-choice pass has claimed (tensor cores,
// a batched or per-slot matrix-vector kernel).
func markUnclaimed(u *Unit, pass, attr string, shape func(op string, in []gpu.Operand) bool) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || u.Plan == nil {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Attrs.Bool(gpu.AttrTensorCores) || d.Attrs.Bool(gpu.AttrBatchedMatvec) || d.Attrs.Bool(gpu.AttrExpertPerSlot) {
			continue
		}
		in, _ := dispatchOperands(u.Plan, d)
		if !shape(d.Op, in) {
			continue
		}
		setAttr(d, attr, true)
		u.count(pass+": "+d.Op, 1)
	}
	return nil
}

// setAttr sets one attribute on a copy of the dispatch's attributes (lower may share
// the map with the graph value, and fusions share maps between values).
func setAttr(d *plan.Dispatch, key string, v any) {
	a := d.Attrs.Clone()
	if a == nil {
		a = map[string]any{}
	}
	a[key] = v
	d.Attrs = a
}

// clearAttr removes one attribute from a copy of the dispatch's attributes, for
// setAttr's reason.
func clearAttr(d *plan.Dispatch, key string) {
	a := d.Attrs.Clone()
	delete(a, key)
	d.Attrs = a
}

// chunkedDelta marks, for a target with the chunked gated delta kernel (CUDA), every
// gated_delta of a step of more than one token whose key heads the kernel takes with
// gpu.AttrChunkedDelta, so select-kernels launches gated_delta_chunked
// (ops/kernels/deltanet_cuda.k) instead of the recurrent gated_delta: the same rule, its
// chain T / 64 chunk steps long instead of T token steps.
func chunkedDelta(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.ChunkedDelta || u.Plan == nil || u.Plan.Tokens < 2 {
		return err
	}
	for i := range u.Plan.Dispatches {
		d := &u.Plan.Dispatches[i]
		if d.Op != "gated_delta" {
			continue
		}
		if in, _ := dispatchOperands(u.Plan, d); len(in) == 6 && len(in[0].Shape) == 3 && gpu.ChunkedDeltaShape(in[0].Shape[2]) {
			setAttr(d, gpu.AttrChunkedDelta, true)
			u.count("chunked-delta: gated_delta_chunked", 1)
		}
	}
	return nil
}
