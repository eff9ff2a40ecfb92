//go:build linux

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// gpu returns the device, or skips the test with the reason CUDA is not loadable.
func openGPU(t *testing.T) *device {
	t.Helper()
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	g, err := openDevice()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The compiler's layout of the generated args structs equals Go's.
func TestProbeLayoutOnDevice(t *testing.T) {
	g := openGPU(t)
	layouts := kernels.Layouts()
	err := g.do(func() error {
		out, err := g.alloc(int64(8 * len(layouts)))
		if err != nil {
			return err
		}
		defer g.free(out)
		args := &struct{ Out uint64 }{out}
		l, err := g.newLaunch(kernels.KernelProbeLayout, [3]int{1, 1, 1}, 32, args, unsafe.Pointer(args))
		if err != nil {
			return err
		}
		if err := g.run(l); err != nil {
			return err
		}
		if err := g.sync(); err != nil {
			return err
		}
		got := make([]byte, 8*len(layouts))
		if err := g.download(got, out); err != nil {
			return err
		}
		for i, fl := range layouts {
			if v := binary.LittleEndian.Uint64(got[8*i:]); uintptr(v) != fl.Offset {
				t.Errorf("%s.%s: device says %d, Go %d", fl.Struct, fl.Field, v, fl.Offset)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// opCase is one op run on random inputs by its CPU reference and its CUDA kernel.
type opCase struct {
	name  string
	op    string
	attrs graph.Attrs
	in    []*ops.Tensor
	// alias maps a result index to the arg index whose buffer it updates in place.
	alias map[int]int
	C     int
	// splits > 0 runs attention as the plan's split form (attention_partial over this
	// many key ranges, then attention_merge) against attention's reference.
	splits int
	// blocks, with splits, is the fixed-block rule of the split (ops.KeyRanges; zero:
	// equal ranges), given to attention_partial and attention_merge as split-attention
	// gives it.
	blocks ops.KeyRanges
	// tol, when set, is the case's bound on the max abs error relative to max(|ref|, 1)
	// (default 1e-5; 1e-2 for bf16 results).
	tol float64
	// unwritten lists results the kernel leaves alone by design (add_rms_norm_matmuls's
	// normed row with gpu.AttrNormRowUnread): they must still hold the poison after it runs.
	unwritten []int
	// launches, when above 1, runs each dispatch that many times in a row, every time into
	// freshly poisoned results, the last one's checked: a kernel that keeps state on the
	// device between launches (router_q8's counter) must leave it as it found it.
	launches int
}

// gdnStep is a gated_delta_step case for one token: the in_proj_qkv output x holds q, k
// and v of Hk, Hk and Hv heads and 3 channels past them; the conv state has the stated dtype.
func gdnStep(name string, r *rand.Rand, Hk, Hv, Dk, Dv int, state graph.DType) opCase {
	return opCase{name: name, op: "gated_delta_step",
		attrs: graph.Attrs{"key_heads": int64(Hk), "q_start": int64(0), "k_start": int64(Hk * Dk), "v_start": int64(2 * Hk * Dk),
			"q_eps": 1e-6, "q_scale": 1 / math.Sqrt(float64(Dk)), "k_eps": 1e-6, "k_scale": 1.0, "form": "recurrent", "chunk": int64(64)},
		in: randtensor.GatedDeltaStepInputs(r, Hk, Hv, Dk, Dv, state), alias: map[int]int{1: 7}}
}

// convL2 is a conv1d_silu_l2 case: T tokens of Ch channels, a conv of K taps, and H
// heads of D for q at qs and for k at ks, each with its own eps and scale.
func convL2(name string, r *rand.Rand, T, Ch, K, H, D, qs, ks int, state graph.DType) opCase {
	return opCase{name: name, op: "conv1d_silu_l2",
		attrs: graph.Attrs{"q_start": int64(qs), "q_end": int64(qs + H*D), "k_start": int64(ks), "k_end": int64(ks + H*D),
			"shape": fmt.Sprintf("[%d,%d,%d]", T, H, D), "q_eps": 1e-6, "q_scale": 1 / math.Sqrt(float64(D)), "k_eps": 1e-5, "k_scale": 1.0},
		in: randtensor.ConvL2Inputs(r, T, Ch, K, state), alias: map[int]int{3: 1}}
}

// deltaNorm is a one-token gated_delta_norm case (the fuse-delta-norm pass): q and k of Hk
// heads scaled as the model's L2-normed ones roughly are, the state, and a norm weight
// of the given dtype.
func deltaNorm(name string, r *rand.Rand, Hk, Hv, Dk, Dv int, w graph.DType) opCase {
	return opCase{name: name, op: "gated_delta_norm", attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64), "eps": 1e-6},
		in: randtensor.GatedDeltaNormInputs(r, Hk, Hv, Dk, Dv, w), alias: map[int]int{1: 5}}
}

func typeOf(t *ops.Tensor) graph.Type {
	return graph.Type{DType: t.DType, Shape: graph.S(t.Shape...), Group: t.Group}
}

func TestKernelsMatchReferences(t *testing.T) {
	g := openGPU(t)
	for _, c := range opCases() {
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	}
}

// gated_delta_chunked (the chunked-delta pass's kernel, or the graph's chunked form)
// against both CPU forms on inputs shaped as a prefill step's (L2-normed q and k,
// log-decays <= 0, beta in (0, 1)): the model's head dims with two value heads per key
// head over three chunks, the last partial; one whole chunk of a value dim that leaves a
// group's columns partly empty; a single partial chunk; a key dim that is a multiple of 4
// but not of 8, over a chunk and one token. Against the chunked reference (the same rule
// in the same chunks, its sums in another order) and the recurrent one (the form the
// model's graph has; the mark makes the kernel chunked).
func TestGatedDeltaChunked(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(41, 42))
	for _, s := range []struct{ T, Hk, Hv, Dk, Dv int }{
		{150, 2, 4, 128, 128}, {64, 3, 3, 64, 40}, {5, 1, 2, 32, 24}, {65, 2, 2, 36, 33},
	} {
		in := randtensor.GatedDeltaPrefillInputs(r, s.T, s.Hk, s.Hv, s.Dk, s.Dv)
		name := fmt.Sprintf("T%d/Hk%d/Hv%d/Dk%d/Dv%d", s.T, s.Hk, s.Hv, s.Dk, s.Dv)
		chunked := graph.Attrs{"form": "chunked", "chunk": int64(kernels.DeltaChunk)}
		marked := graph.Attrs{"form": "recurrent", "chunk": int64(kernels.DeltaChunk), gpu.AttrChunkedDelta: true}
		t.Run(name+"/chunked", func(t *testing.T) {
			runOpCase(t, g, opCase{name: name, op: "gated_delta", attrs: chunked, in: in, alias: map[int]int{1: 5}, tol: 2e-5})
		})
		t.Run(name+"/recurrent", func(t *testing.T) {
			runOpCase(t, g, opCase{name: name, op: "gated_delta", attrs: marked, in: in, alias: map[int]int{1: 5}, tol: 2e-5})
		})
	}
}

// attention_gqa over the shapes that matter: head dims, kv heads, cache dtypes, query
// heads per kv head, and contexts that fill many key ranges (the merge).
func TestAttentionVariants(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, D := range []int{64, 256} {
		for _, kvh := range []int{1, 2} {
			for _, dt := range []graph.DType{graph.F32, graph.BF16} {
				for _, ctx := range []int{0, 40, 290} {
					for _, T := range []int{1, 3} {
						cache := func() *ops.Tensor {
							if dt == graph.BF16 {
								return randtensor.BF16(r, 300, kvh, D)
							}
							return randtensor.F32(r, 300, kvh, D)
						}
						c := opCase{name: fmt.Sprintf("D%d/kvh%d/%s/C%d/T%d", D, kvh, dt, ctx, T), op: "attention",
							attrs: graph.Attrs{"scale": 1 / math.Sqrt(float64(D))},
							in:    []*ops.Tensor{randtensor.F32(r, T, 8*kvh, D), cache(), cache()}, C: ctx}
						runAttentionSplits(t, g, c, gpu.CUDA.AttentionSplits(T, 8*kvh, kvh, D))
					}
				}
			}
		}
	}
}

// runAttentionSplits runs attention case c whole and, where the plan would split it into
// splits > 1 key ranges, split; for one token also decode's fixed-block split
// (split-attention from KeyBlockSplitFrom keys on): below the switch (C 0), at it (C 40
// sees 41 keys), past it (C 290: 10 blocks of 32), and ranges grown past a grid of 4 (C
// 290: 4 of 80 keys).
func runAttentionSplits(t *testing.T, g *device, c opCase, splits int) {
	t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	if splits < 2 {
		return
	}
	c.splits = splits
	t.Run(c.name+"/split", func(t *testing.T) { runOpCase(t, g, c) })
	if c.in[0].Shape[0] != 1 {
		return
	}
	c.splits, c.blocks = kernels.AttnMaxRanges, ops.KeyRanges{Splits: kernels.AttnMaxRanges, Block: kernels.AttnKeyBlock, BlockFrom: 41, BlockKeys: 32, ShortSplits: splits}
	t.Run(c.name+"/blocks", func(t *testing.T) { runOpCase(t, g, c) })
	c.splits, c.blocks = 4, ops.KeyRanges{Splits: 4, Block: kernels.AttnKeyBlock, BlockFrom: 1, BlockKeys: 16, ShortSplits: 2}
	t.Run(c.name+"/blocks-grown", func(t *testing.T) { runOpCase(t, g, c) })
}

// attention_gqa_mma (the mma-decode-attention pass's mark) against the reference over
// attention_gqa's shapes: head dims 64, 128 and 256, 1 to 8 query heads per kv head
// (the mma's 8 columns, the rest zero), one and two kv heads (a warp per 32 head dims: 2,
// 4 and 8 warps whose partial scores meet), both cache dtypes, contexts inside one key
// tile and past many (each tile's loads issued while the one before multiplies), one and
// three tokens; whole, split into equal key ranges, and decode's fixed-block split below,
// at and past its switch and with ranges grown past the grid.
// The caches hold NaN past the keys in use, so a key past a range that is not masked to
// zero fails.
func TestDecodeAttentionMMA(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(21, 22))
	eachDecodeAttentionShape([]int{1, 3}, 3, func(D, G, kvh int, dt graph.DType, ctx, T int) {
		c := decodeAttentionCase(r, "mma", graph.Attrs{gpu.AttrMMADecodeAttention: true}, D, G, kvh, dt, ctx, T)
		runAttentionSplits(t, g, c, gpu.CUDA.AttentionSplits(T, G*kvh, kvh, D))
	})
}

// attention_gqa_staged (the staged-decode-attention pass's mark) against the reference
// over attention_gqa_mma's shapes for one token (the kernel's only case): head dims 64,
// 128 and 256, 1 to 8 query heads per kv head, one and two kv heads, both cache dtypes,
// contexts inside one key tile and past many; whole (one group walks 291 keys, 19 tiles
// through its four stages, each slot refilled four times), split into the plan's equal
// ranges and into 3 (7 tiles a range, the appended key in the last), and the fixed-block
// split. The caches hold NaN past the keys in use (no copy reaches them: a key past a
// range must read as zero, whatever an earlier group left in its slot). Under cuda/emu the
// kernel checks that no copy before the programmatic-launch wait reads the key the step
// appends (PZ_EMU_CHECK).
func TestDecodeAttentionStaged(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(23, 24))
	eachDecodeAttentionShape([]int{1}, 2, func(D, G, kvh int, dt graph.DType, ctx, T int) {
		c := decodeAttentionCase(r, "staged", graph.Attrs{gpu.AttrMMADecodeAttention: true, gpu.AttrStagedDecodeAttention: true}, D, G, kvh, dt, ctx, T)
		runAttentionSplits(t, g, c, gpu.CUDA.AttentionSplits(1, G*kvh, kvh, D))
		c.splits, c.name = 3, c.name+"/split3"
		t.Run(c.name, func(t *testing.T) { runOpCase(t, g, c) })
	})
}

// eachDecodeAttentionShape calls f for the decode attention kernels' shapes: head dims 64,
// 128 and 256, 1, 2, 4 and 8 query heads per kv head, a float32 and a bf16 cache, contexts
// 0, 40 and 290, each token count of tokens, one or two kv heads in turn; at the larger
// head dims, which cost the emulator most, only one in every `every` of them (a rotation).
func eachDecodeAttentionShape(tokens []int, every int, f func(D, G, kvh int, dt graph.DType, ctx, T int)) {
	n := 0
	for _, D := range []int{64, 128, 256} {
		for _, G := range []int{1, 2, 4, 8} {
			for _, dt := range []graph.DType{graph.F32, graph.BF16} {
				for ci, ctx := range []int{0, 40, 290} {
					for _, T := range tokens {
						if D > 64 && (ci+G+T+n)%every != 0 {
							continue
						}
						n++
						f(D, G, 1+n%2, dt, ctx, T)
					}
				}
			}
		}
	}
}

// decodeAttentionCase is attention of T tokens after ctx cached keys, G query heads for
// each of kvh kv heads of head dim D, the dispatch marked with marks; its caches (300 rows
// of dtype dt) hold NaN past the keys in use, so a key past a range that is not masked to
// zero fails.
func decodeAttentionCase(r *rand.Rand, label string, marks graph.Attrs, D, G, kvh int, dt graph.DType, ctx, T int) opCase {
	cache := func() *ops.Tensor {
		c := randtensor.F32(r, 300, kvh, D)
		if dt == graph.BF16 {
			c = randtensor.BF16(r, 300, kvh, D)
		}
		poisonPast(c, ctx+T)
		return c
	}
	attrs := graph.Attrs{"scale": 1 / math.Sqrt(float64(D))}
	for k, v := range marks {
		attrs[k] = v
	}
	name := fmt.Sprintf("%s/D%d/G%d/kvh%d/%s/C%d/T%d", label, D, G, kvh, dt, ctx, T)
	return opCase{name: name, op: "attention", attrs: attrs, in: []*ops.Tensor{randtensor.F32(r, T, G*kvh, D), cache(), cache()}, C: ctx}
}

// poisonPast fills the cache rows from row n on with NaN: keys no query of the case sees.
func poisonPast(c *ops.Tensor, n int) {
	nan := []byte{0x00, 0x00, 0xc0, 0x7f} // float32 NaN, little-endian; its upper half is bf16's
	if c.DType == graph.BF16 {
		nan = nan[2:]
	}
	for i := n * len(c.Data) / c.Shape[0]; i < len(c.Data); i += len(nan) {
		copy(c.Data[i:], nan)
	}
}

// The cases are valid ops (types infer, references run) on any machine.
func TestOpCasesAreValid(t *testing.T) {
	for _, c := range opCases() {
		if _, _, err := referenceOf(c); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// routedIDs is a [T, k] routing of T tokens to k distinct experts of E each, drawn from r.

func opCases() []opCase {
	r := rand.New(rand.NewPCG(1, 2))
	routed := func(T, k, E int) *ops.Tensor { return randtensor.Routed(r, T, k, E) }
	kcache := func(dt graph.DType) *ops.Tensor {
		if dt == graph.BF16 {
			return randtensor.BF16(r, 16, 2, 64)
		}
		return randtensor.F32(r, 16, 2, 64)
	}
	batched := graph.Attrs{gpu.AttrBatchedMatvec: true}
	cases := []opCase{
		{name: "qmatmul q4 decode", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 256), randtensor.Quant(r, graph.Q4, 72, 256)}},
		{name: "qmatmul q8 decode wide", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 2048), randtensor.Quant(r, graph.Q8, 37, 2048)}},
		{name: "qmatmul q8 decode one long row", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 2560), randtensor.Quant(r, graph.Q8, 1, 2560)}},
		{name: "qmatmul q8 3 rows", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 3, 128), randtensor.Quant(r, graph.Q8, 40, 128)}},
		{name: "qmatmul q4 tiled", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 70, 256), randtensor.Quant(r, graph.Q4, 136, 256)}},
		{name: "matmul bf16 tiled", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 65, 64), randtensor.BF16(r, 24, 64)}},
		{name: "matmul f32 decode", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 1, 64), randtensor.F32(r, 24, 64)}},
		{name: "dequant q4", op: "dequant", in: []*ops.Tensor{randtensor.Quant(r, graph.Q4, 3, 5, 128)}},
		{name: "embed q4", op: "embed", in: []*ops.Tensor{randtensor.Quant(r, graph.Q4, 50, 128), randtensor.IDs([]int32{3, 49, 0}, 3)}},
		{name: "embed bf16", op: "embed", in: []*ops.Tensor{randtensor.BF16(r, 50, 96), randtensor.IDs([]int32{7, 1}, 2)}},
		{name: "expert q4 decode", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 16, 40, 128), routed(1, 4, 16)}},
		{name: "expert q4 per-slot x", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 128), randtensor.Quant(r, graph.Q4, 16, 40, 128), routed(2, 4, 16)}},
		{name: "expert q4 tiled", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 40, 128), randtensor.Quant(r, graph.Q4, 16, 72, 128), routed(40, 4, 16)}},
		{name: "expert bf16 tiled per-slot", op: "expert_matmul", in: []*ops.Tensor{randtensor.F32(r, 20, 4, 64), randtensor.BF16(r, 8, 40, 64), routed(20, 4, 8)}},
		// expert_matvec_gather_q4 (the expert-gather pass): 10 rows per expert; K 2048 (64 lanes
		// per row, reduced across SIMD groups); per-slot x; more slots than a group gathers
		// at a time (EXPERT_SLOTS), so the gathering runs in rounds.
		// matvec_q4_rows (the batched-matvec pass): rows not a multiple of the batch, M not
		// of the tile, K 2048.
		{name: "qmatmul q4 batched 21 rows", op: "qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 21, 256), randtensor.Quant(r, graph.Q4, 72, 256)}},
		{name: "qmatmul q4 batched 3d, K 2048", op: "qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 3, 4, 2048), randtensor.Quant(r, graph.Q4, 37, 2048)}},
		{name: "qmatmul q4 batched K 64", op: "qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 17, 64), randtensor.Quant(r, graph.Q4, 40, 64)}},
		{name: "expert q4 per slot, 160 slots", op: "expert_qmatmul", attrs: graph.Attrs{gpu.AttrExpertPerSlot: true}, in: []*ops.Tensor{randtensor.F32(r, 40, 128), randtensor.Quant(r, graph.Q4, 16, 72, 128), routed(40, 4, 16)}},
		{name: "expert q4 gathered matvec", op: "expert_qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 40, 128), randtensor.Quant(r, graph.Q4, 16, 72, 128), routed(40, 4, 16)}},
		{name: "expert q4 gathered matvec K 2048", op: "expert_qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 20, 2048), randtensor.Quant(r, graph.Q4, 16, 36, 2048), routed(20, 4, 16)}},
		{name: "expert q4 gathered matvec per-slot x", op: "expert_qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 20, 4, 64), randtensor.Quant(r, graph.Q4, 8, 40, 64), routed(20, 4, 8)}},
		{name: "expert q4 gathered matvec in rounds", op: "expert_qmatmul", attrs: batched, in: []*ops.Tensor{randtensor.F32(r, 1100, 64), randtensor.Quant(r, graph.Q4, 4, 12, 64), routed(1100, 4, 4)}},
		{name: "rms_norm bf16 w", op: "rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 3, 300), randtensor.BF16(r, 300)}},
		{name: "l2_norm", op: "l2_norm", attrs: graph.Attrs{"eps": 1e-6, "scale": 0.25}, in: []*ops.Tensor{randtensor.F32(r, 2, 3, 32)}},
		{name: "gated_rms_norm", op: "gated_rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 2, 4, 64), randtensor.F32(r, 2, 4, 64), randtensor.BF16(r, 64)}},
		{name: "rope", op: "rope", attrs: graph.Attrs{"dims": 16, "theta": 1e7}, in: []*ops.Tensor{randtensor.F32(r, 3, 4, 64)}, C: 11},
		{name: "kv_append f32", op: "kv_append", in: []*ops.Tensor{kcache(graph.F32), randtensor.F32(r, 3, 2, 64)}, alias: map[int]int{0: 0}, C: 5},
		{name: "kv_append bf16", op: "kv_append", in: []*ops.Tensor{kcache(graph.BF16), randtensor.F32(r, 2, 2, 64)}, alias: map[int]int{0: 0}, C: 9},
		{name: "attention f32", op: "attention", attrs: graph.Attrs{"scale": 0.125}, in: []*ops.Tensor{randtensor.F32(r, 3, 8, 64), kcache(graph.F32), kcache(graph.F32)}, C: 7},
		{name: "attention bf16 decode", op: "attention", attrs: graph.Attrs{"scale": 0.125}, in: []*ops.Tensor{randtensor.F32(r, 1, 8, 64), kcache(graph.BF16), kcache(graph.BF16)}, C: 15},
		{name: "attention no split", op: "attention", attrs: graph.Attrs{"scale": 0.125}, in: []*ops.Tensor{randtensor.F32(r, 140, 4, 64), randtensor.F32(r, 150, 2, 64), randtensor.F32(r, 150, 2, 64)}, C: 5},
		{name: "attention 16 heads per kv head", op: "attention", attrs: graph.Attrs{"scale": 0.1}, in: []*ops.Tensor{randtensor.F32(r, 2, 16, 32), randtensor.F32(r, 16, 1, 32), randtensor.F32(r, 16, 1, 32)}, C: 3},
		{name: "attention D 256 decode", op: "attention", attrs: graph.Attrs{"scale": 0.0625}, in: []*ops.Tensor{randtensor.F32(r, 1, 16, 256), randtensor.BF16(r, 300, 2, 256), randtensor.BF16(r, 300, 2, 256)}, C: 290},
		{name: "qmatmul q4 matvec odd M", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 64), randtensor.Quant(r, graph.Q4, 37, 64)}},
		{name: "qmatmul q8 decode", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q8, 9, 128)}},
		{name: "gated_delta 128", op: "gated_delta", attrs: graph.Attrs{"form": "recurrent", "chunk": 64},
			in:    []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 5, 2, 128), 0.09), randtensor.Scaled(randtensor.F32(r, 5, 2, 128), 0.09), randtensor.F32(r, 5, 4, 128), randtensor.Scaled(randtensor.F32(r, 5, 4), 0.1), randtensor.F32(r, 5, 4), randtensor.F32(r, 4, 128, 128)},
			alias: map[int]int{1: 5}},
		{name: "conv1d", op: "conv1d", in: []*ops.Tensor{randtensor.F32(r, 5, 96), randtensor.F32(r, 3, 96), randtensor.BF16(r, 96, 4)}, alias: map[int]int{1: 1}},
		{name: "conv1d decode bf16 state", op: "conv1d", in: []*ops.Tensor{randtensor.F32(r, 1, 96), randtensor.BF16(r, 3, 96), randtensor.BF16(r, 96, 4)}, alias: map[int]int{1: 1}},
		// Eight token slices per group: of 2 tokens at 13 (later slices' windows reach back
		// across two slices and into the state, the last slice holds 1), and of 67 at 530
		// (several load batches, a partial one); channels not a multiple of a group's 32;
		// a 3-tap kernel (K - 1 = 2 state rows).
		{name: "conv1d 13 tokens in 8 slices", op: "conv1d", in: []*ops.Tensor{randtensor.F32(r, 13, 70), randtensor.F32(r, 3, 70), randtensor.BF16(r, 70, 4)}, alias: map[int]int{1: 1}},
		{name: "conv1d_silu 530 tokens, 3 taps", op: "conv1d_silu", in: []*ops.Tensor{randtensor.F32(r, 530, 40), randtensor.BF16(r, 2, 40), randtensor.BF16(r, 40, 3)}, alias: map[int]int{1: 1}},
		{name: "gated_delta", op: "gated_delta", attrs: graph.Attrs{"form": "recurrent", "chunk": 64},
			in:    []*ops.Tensor{randtensor.F32(r, 3, 2, 32), randtensor.F32(r, 3, 2, 32), randtensor.F32(r, 3, 4, 64), randtensor.F32(r, 3, 4), randtensor.F32(r, 3, 4), randtensor.F32(r, 4, 32, 64)},
			alias: map[int]int{1: 5}},
		// The fused GDN decode step (fuse-gdn-prologue) over the GQA ratios and dims the
		// plain kernels take, and the conv state's shift after it.
		gdnStep("gated_delta_step Hk 2 Hv 4 Dk 32 Dv 24 bf16 conv state", r, 2, 4, 32, 24, graph.BF16),
		gdnStep("gated_delta_step head dims 128 (the model's), 2 value heads per key head", r, 2, 4, 128, 128, graph.F32),
		gdnStep("gated_delta_step Hk = Hv 3, Dv 7", r, 3, 3, 64, 7, graph.F32),
		// The conv with the q/k heads' L2 norms in its epilogue (fuse-conv-l2), one kernel
		// for a decode step (gpu/fused_convl2_test.go checks these shapes take it): the
		// model's shape; heads of 64 that start mid-group, k before q, channels ending
		// inside the last group, a bf16 state; heads of 32 (a SIMD group each), 3 taps.
		// Prefill expands into conv1d_silu and the two slice_l2_norms (checked in plans by
		// pistil check with the pass on, --chunk 7).
		convL2("conv1d_silu_l2 decode, the model's shape (Ch 8192, K 4, q/k 16 x 128, f32 state)", r, 1, 8192, 4, 16, 128, 0, 2048, graph.F32),
		convL2("conv1d_silu_l2 decode Ch 333, heads of 64 from mid-group, k before q, bf16 state", r, 1, 333, 4, 2, 64, 192, 64, graph.BF16),
		convL2("conv1d_silu_l2 decode Ch 200, heads of 32, 3 taps", r, 1, 200, 3, 3, 32, 0, 96, graph.F32),
		// The delta rule with the gated norm of its output (fuse-delta-norm): the model's
		// heads (a group of 1,024 threads per value head), GQA with Dv not a multiple of
		// the 4 columns a SIMD group takes, Hk = Hv.
		deltaNorm("gated_delta_norm Hk 16 Hv 32 Dk 128 Dv 128 (the model's)", r, 16, 32, 128, 128, graph.BF16),
		deltaNorm("gated_delta_norm Hk 2 Hv 4 Dk 32 Dv 22", r, 2, 4, 32, 22, graph.F32),
		deltaNorm("gated_delta_norm Hk = Hv 3 Dk 64 Dv 40", r, 3, 3, 64, 40, graph.BF16),
		{name: "conv_state_shift decode bf16", op: "conv_state_shift", in: []*ops.Tensor{randtensor.F32(r, 1, 96), randtensor.BF16(r, 3, 96)}, alias: map[int]int{0: 1}},
		{name: "conv_state_shift 2 tokens f32", op: "conv_state_shift", in: []*ops.Tensor{randtensor.F32(r, 2, 200), randtensor.F32(r, 3, 200)}, alias: map[int]int{0: 1}},
		{name: "conv_state_shift 5 tokens past the state", op: "conv_state_shift", in: []*ops.Tensor{randtensor.F32(r, 5, 40), randtensor.F32(r, 3, 40)}, alias: map[int]int{0: 1}},
		{name: "exp of a weight", op: "exp", in: []*ops.Tensor{randtensor.F32(r, 7)}},
		{name: "softplus", op: "softplus", in: []*ops.Tensor{randtensor.F32(r, 2, 33)}},
		{name: "silu", op: "silu", in: []*ops.Tensor{randtensor.F32(r, 2, 33)}},
		{name: "sigmoid", op: "sigmoid", in: []*ops.Tensor{randtensor.F32(r, 2, 33)}},
		{name: "neg", op: "neg", in: []*ops.Tensor{randtensor.F32(r, 9)}},
		{name: "add suffix bf16", op: "add", in: []*ops.Tensor{randtensor.F32(r, 3, 4), randtensor.BF16(r, 4)}},
		{name: "mul dims of 1", op: "mul", in: []*ops.Tensor{randtensor.F32(r, 3, 4, 5), randtensor.F32(r, 3, 1, 5)}},
		{name: "swiglu", op: "swiglu", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 8), randtensor.F32(r, 2, 4, 8)}},
		{name: "slice", op: "slice", attrs: graph.Attrs{"axis": 1, "start": 3, "end": 10}, in: []*ops.Tensor{randtensor.F32(r, 3, 12, 2)}},
		{name: "router", op: "router", attrs: graph.Attrs{"k": 8}, in: []*ops.Tensor{randtensor.F32(r, 5, 256)}},
		{name: "moe_combine", op: "moe_combine", in: []*ops.Tensor{randtensor.F32(r, 3, 4, 40), randtensor.F32(r, 3, 4)}},
		{name: "argmax", op: "argmax", in: []*ops.Tensor{randtensor.F32(r, 3, 1000)}},
		// Fused ops (one kernel or a composite of stages).
		{name: "add_rms_norm", op: "add_rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 3, 300), randtensor.F32(r, 3, 300), randtensor.BF16(r, 300)}},
		{name: "gdn_gates", op: "gdn_gates", in: []*ops.Tensor{randtensor.F32(r, 3, 4), randtensor.F32(r, 3, 4), randtensor.F32(r, 4), randtensor.BF16(r, 4)}},
		{name: "conv1d_silu", op: "conv1d_silu", in: []*ops.Tensor{randtensor.F32(r, 5, 96), randtensor.F32(r, 3, 96), randtensor.BF16(r, 96, 4)}, alias: map[int]int{1: 1}},
		{name: "slice_l2_norm in place", op: "slice_l2_norm", attrs: graph.Attrs{"axis": 1, "start": 64, "end": 128, "shape": "[3,2,32]", "eps": 1e-6, "scale": 0.5},
			in: []*ops.Tensor{randtensor.F32(r, 3, 192)}},
		{name: "slice_l2_norm copied", op: "slice_l2_norm", attrs: graph.Attrs{"axis": 1, "start": 1, "end": 3, "shape": "[3,2,32]", "eps": 1e-6, "scale": 0.5},
			in: []*ops.Tensor{randtensor.F32(r, 3, 4, 32)}},
		{name: "rms_norm_rope", op: "rms_norm_rope", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7}, in: []*ops.Tensor{randtensor.F32(r, 3, 4, 64), randtensor.BF16(r, 64)}, C: 4},
		// The query heads read in place from the second half of each [query | gate] row; the
		// keys normed, rotated and written into cache rows C..C+T-1 (f32 and bf16 caches).
		{name: "slice_rms_norm_rope", op: "slice_rms_norm_rope", attrs: graph.Attrs{"axis": 2, "start": 64, "end": 128, "eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{randtensor.F32(r, 3, 4, 128), randtensor.BF16(r, 64)}, C: 4},
		{name: "rms_norm_rope_append f32", op: "rms_norm_rope_append", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{kcache(graph.F32), randtensor.F32(r, 3, 2, 64), randtensor.BF16(r, 64)}, alias: map[int]int{0: 0}, C: 5},
		{name: "rms_norm_rope_append bf16 decode", op: "rms_norm_rope_append", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{kcache(graph.BF16), randtensor.F32(r, 1, 2, 64), randtensor.BF16(r, 64)}, alias: map[int]int{0: 0}, C: 9},
		{name: "matmuls", op: "matmuls", in: []*ops.Tensor{randtensor.F32(r, 2, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.Quant(r, graph.Q4, 24, 128), randtensor.Quant(r, graph.Q8, 8, 128)}},
		{name: "matmul_swiglu", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.Quant(r, graph.Q4, 40, 128)}},
		{name: "expert_matmul_swiglu", op: "expert_matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 20, 128), randtensor.Quant(r, graph.Q4, 8, 40, 128), randtensor.Quant(r, graph.Q4, 8, 40, 128), routed(20, 4, 8)}},
		{name: "matmul_gated_add", op: "matmul_gated_add", in: []*ops.Tensor{randtensor.F32(r, 2, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.F32(r, 2, 1), randtensor.F32(r, 2, 40)}},
		{name: "matmul_router", op: "matmul_router", attrs: graph.Attrs{"k": 4}, in: []*ops.Tensor{randtensor.F32(r, 3, 128), randtensor.Quant(r, graph.Q8, 16, 128)}},
		// router_q8 (marked as the router-matvec pass marks it): the model's router (256
		// experts of K 2048, top 8, renormalised as the model routes: route_token always
		// renormalises); 37 experts, an odd last group of one row, top 2, K 64 (fewer
		// chunks than threads); 27 experts all picked, so every group's logits decide the
		// order (a top few rarely notices a group's logits missing); the model's shape
		// three times in a row into fresh results (the last group must put the counter
		// back).
		{name: "matmul_router router_q8 256 experts top 8", op: "matmul_router", attrs: graph.Attrs{"k": 8, gpu.AttrRouterMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, 2048), 0.002), randtensor.Quant(r, graph.Q8, 256, 2048)}},
		{name: "matmul_router router_q8 37 experts top 2", op: "matmul_router", attrs: graph.Attrs{"k": 2, gpu.AttrRouterMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 64), randtensor.Quant(r, graph.Q8, 37, 64)}},
		{name: "matmul_router router_q8 27 experts, every one picked", op: "matmul_router", attrs: graph.Attrs{"k": 27, gpu.AttrRouterMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, 128), 0.05), randtensor.Quant(r, graph.Q8, 27, 128)}},
		{name: "matmul_router router_q8 three launches in a row", op: "matmul_router", attrs: graph.Attrs{"k": 8, gpu.AttrRouterMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 1, 2048), 0.002), randtensor.Quant(r, graph.Q8, 256, 2048)}, launches: 3},
		{name: "expert_matmul_combine", op: "expert_matmul_combine", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 64), randtensor.Quant(r, graph.Q4, 8, 40, 64), routed(2, 4, 8), randtensor.F32(r, 2, 4)}},
		{name: "sigmoid_gate_matmul", op: "sigmoid_gate_matmul", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 40, 128)}},
		{name: "matmuls decode q4", op: "matmuls", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.Quant(r, graph.Q4, 24, 128), randtensor.Quant(r, graph.Q4, 72, 128)}},
		{name: "matmul_swiglu rows", op: "matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 3, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.Quant(r, graph.Q4, 40, 128)}},
		{name: "expert_matmul_swiglu decode", op: "expert_matmul_swiglu", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 8, 40, 128), randtensor.Quant(r, graph.Q4, 8, 40, 128), routed(1, 4, 8)}},
		{name: "matmul_gated_add decode", op: "matmul_gated_add", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.F32(r, 1, 1), randtensor.F32(r, 1, 40)}},
		// Every thread of a group takes several (expert, chunk) pairs; rows past M in the last group.
		{name: "expert_matmul_combine decode wide", op: "expert_matmul_combine", in: []*ops.Tensor{randtensor.F32(r, 1, 8, 2048), randtensor.Quant(r, graph.Q4, 16, 36, 2048), routed(1, 8, 16), randtensor.F32(r, 1, 8)}},
		{name: "expert_matmul_combine tiled", op: "expert_matmul_combine", in: []*ops.Tensor{randtensor.F32(r, 20, 4, 64), randtensor.Quant(r, graph.Q4, 8, 40, 64), routed(20, 4, 8), randtensor.F32(r, 20, 4)}},
		// The shared expert as one more slot (fuse-shared-expert): narrower and wider than
		// the routed experts; more (expert, chunk) pairs than 128 threads (8·16 + 16 at
		// K = SK = 512). Several tokens expand into two fused ops that expand again, which
		// this harness does not do: the prefill plans of TestGrid and pistil check run them.
		{name: "expert_matmul_swiglu_shared decode narrow", op: "expert_matmul_swiglu_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 128),
			randtensor.Quant(r, graph.Q4, 8, 40, 128), randtensor.Quant(r, graph.Q4, 8, 40, 128), routed(1, 4, 8), randtensor.Quant(r, graph.Q4, 24, 128), randtensor.Quant(r, graph.Q4, 24, 128)}},
		{name: "expert_matmul_swiglu_shared decode wide", op: "expert_matmul_swiglu_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 2048),
			randtensor.Quant(r, graph.Q4, 16, 36, 2048), randtensor.Quant(r, graph.Q4, 16, 36, 2048), routed(1, 8, 16), randtensor.Quant(r, graph.Q4, 72, 2048), randtensor.Quant(r, graph.Q4, 72, 2048)}},
		{name: "expert_matmul_combine_shared decode", op: "expert_matmul_combine_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 4, 64),
			randtensor.Quant(r, graph.Q4, 8, 40, 64), routed(1, 4, 8), randtensor.F32(r, 1, 4), randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q4, 40, 128), randtensor.F32(r, 1, 1)}},
		{name: "expert_matmul_combine_shared decode wide", op: "expert_matmul_combine_shared", in: []*ops.Tensor{randtensor.F32(r, 1, 8, 512),
			randtensor.Quant(r, graph.Q4, 16, 36, 512), routed(1, 8, 16), randtensor.F32(r, 1, 8), randtensor.F32(r, 1, 512), randtensor.Quant(r, graph.Q4, 36, 512), randtensor.F32(r, 1, 1)}},
		// The routing in the experts' kernel (fuse-expert-routing): 256 experts top 8 as
		// the model routes, and the model's K with a narrower shared expert.
		{name: "expert_route_swiglu_shared decode 256 experts", op: "expert_route_swiglu_shared", attrs: graph.Attrs{"k": 8}, in: []*ops.Tensor{randtensor.F32(r, 1, 128),
			randtensor.F32(r, 1, 256), randtensor.Quant(r, graph.Q4, 256, 8, 128), randtensor.Quant(r, graph.Q4, 256, 8, 128), randtensor.Quant(r, graph.Q4, 24, 128), randtensor.Quant(r, graph.Q4, 24, 128), randtensor.Quant(r, graph.Q8, 1, 128)}},
		{name: "expert_route_swiglu_shared decode wide", op: "expert_route_swiglu_shared", attrs: graph.Attrs{"k": 4}, in: []*ops.Tensor{randtensor.F32(r, 1, 2048),
			randtensor.F32(r, 1, 16), randtensor.Quant(r, graph.Q4, 16, 36, 2048), randtensor.Quant(r, graph.Q4, 16, 36, 2048), randtensor.Quant(r, graph.Q4, 20, 2048), randtensor.Quant(r, graph.Q4, 20, 2048), randtensor.Quant(r, graph.Q8, 1, 2048)}},
		{name: "sigmoid_gate_matmul rows", op: "sigmoid_gate_matmul", in: []*ops.Tensor{randtensor.F32(r, 3, 128), randtensor.F32(r, 3, 128), randtensor.Quant(r, graph.Q4, 40, 128)}},
		{name: "gated_rms_norm_matmul", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[2,256]"},
			in: []*ops.Tensor{randtensor.F32(r, 2, 4, 64), randtensor.F32(r, 2, 4, 64), randtensor.BF16(r, 64), randtensor.Quant(r, graph.Q4, 40, 256)}},
		// gated_rms_norm_matvec_q4 (marked as the gated-norm-matvec pass marks it): heads of 2 chunks in row groups of 8 lanes (rows past M
		// in the one group); heads of 4 chunks where the second pass over K is half empty;
		// the GDN's shape, 32 heads of 128 in row groups of 128 lanes over 4 SIMD groups.
		{name: "gated_rms_norm_matmul decode", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,256]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 4, 64), randtensor.F32(r, 1, 4, 64), randtensor.BF16(r, 64), randtensor.Quant(r, graph.Q4, 40, 256)}},
		{name: "gated_rms_norm_matmul decode partial pass", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,384]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 3, 128), randtensor.F32(r, 1, 3, 128), randtensor.F32(r, 128), randtensor.Quant(r, graph.Q4, 72, 384)}},
		{name: "gated_rms_norm_matmul decode gdn heads", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,4096]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 32, 128), randtensor.F32(r, 1, 32, 128), randtensor.BF16(r, 128), randtensor.Quant(r, graph.Q4, 20, 4096)}},
	}
	return cases
}

// referenceOf runs a case's CPU reference on copies of its inputs: the result types
// and tensors.
func referenceOf(c opCase) ([]graph.Type, []*ops.Tensor, error) {
	info, ok := ops.Default.Info(c.op)
	if !ok {
		return nil, nil, fmt.Errorf("op %s is not in the table", c.op)
	}
	b := graph.NewBuilder(graph.New(c.op), ops.Default)
	srcs := make([]*graph.Value, len(c.in))
	for i, in := range c.in {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(in), nil)
	}
	v := b.Op(c.op, c.attrs, srcs...)
	if err := b.Err(); err != nil {
		return nil, nil, err
	}
	typ := v.Type
	outTypes := []graph.Type{typ}
	if typ.IsTuple() {
		outTypes = typ.Elems
	}
	// The CPU reference, on copies of the inputs.
	cpuIn := make([]*ops.Tensor, len(c.in))
	for i, in := range c.in {
		cp := *in
		cp.Data = append([]byte(nil), in.Data...)
		cpuIn[i] = &cp
	}
	cpuOut := make([]*ops.Tensor, len(outTypes))
	for i, ot := range outTypes {
		cpuOut[i] = ops.NewTensor(ot.DType, ot.Shape.Eval(graph.Bindings{})...)
	}
	env := &ops.Env{Bind: graph.Bindings{T: c.in[0].Shape[0], C: c.C, N: 16}, Workers: 1}
	if err := info.Ref(env, v, cpuIn, cpuOut); err != nil {
		return nil, nil, err
	}
	return outTypes, cpuOut, nil
}

func runOpCase(t *testing.T, g *device, c opCase) {
	outTypes, cpuOut, err := referenceOf(c)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{dev: g, weights: map[string]*deviceWeight{}}
	gpuOut := make([][]byte, len(outTypes))
	err = g.do(func() error {
		var allocs []uint64
		defer func() {
			for _, a := range allocs {
				g.free(a)
			}
		}()
		put := func(data []byte) (uint64, error) {
			a, err := g.alloc(int64(len(data)))
			if err != nil {
				return 0, err
			}
			allocs = append(allocs, a)
			return a, g.upload(a, data)
		}
		in := make([]gpu.Operand, len(c.in))
		for i, tns := range c.in {
			if tns.DType.Quantized() {
				w, err := b.upload("w", tns)
				if err != nil {
					return err
				}
				allocs = append(allocs, w.w.Data, w.w.Scales, w.w.Biases)
				in[i] = gpu.Operand{Addr: w.w.Data, W: w.w, DType: tns.DType, Shape: tns.Shape}
				continue
			}
			a, err := put(tns.Data)
			if err != nil {
				return err
			}
			in[i] = denseOperand(a, tns.DType, tns.Shape)
		}
		alloc := func(t graph.Type) (gpu.Operand, error) {
			poison := make([]byte, t.Bytes(graph.Bindings{}))
			for k := range poison {
				poison[k] = 0xff // NaN in every float dtype: unwritten outputs fail
			}
			a, err := put(poison)
			if err != nil {
				return gpu.Operand{}, err
			}
			return denseOperand(a, t.DType, t.Shape.Eval(graph.Bindings{})), nil
		}
		steps := []int32{int32(c.C), int32(c.in[0].Shape[0]), 16, 0}
		stepAddr, err := put(unsafe.Slice((*byte)(unsafe.Pointer(&steps[0])), 16))
		if err != nil {
			return err
		}
		out, err := runOnGPU(g, c, in, alloc, stepAddr)
		if err != nil {
			return err
		}
		if err := g.sync(); err != nil {
			return err
		}
		for i, ot := range outTypes {
			gpuOut[i] = make([]byte, ot.Bytes(graph.Bindings{}))
			if err := g.download(gpuOut[i], out[i].Addr); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, ot := range outTypes {
		want, got := cpuOut[i], &ops.Tensor{DType: ot.DType, Shape: cpuOut[i].Shape, Data: gpuOut[i]}
		if slices.Contains(c.unwritten, i) {
			for k, b := range gpuOut[i] {
				if b != 0xff {
					t.Fatalf("result %d byte %d was written (%#x), and the case says the kernel leaves it alone", i, k, b)
				}
			}
			continue
		}
		if ot.DType == graph.I32 {
			w, gg := want.I32(), got.I32()
			for k := range w {
				if w[k] != gg[k] {
					t.Fatalf("result %d element %d: gpu %d, cpu %d", i, k, gg[k], w[k])
				}
			}
			continue
		}
		var maxErr, maxRef float64
		for k := 0; k < want.Elements(); k++ {
			wv, gv := float64(want.Float(k)), float64(got.Float(k))
			if math.IsInf(wv, 0) {
				if gv != wv {
					t.Fatalf("result %d element %d: gpu %v, cpu %v", i, k, gv, wv)
				}
				continue // an empty key range's max is -inf in both
			}
			if math.IsNaN(gv) || math.IsInf(gv, 0) {
				t.Fatalf("result %d element %d is %v (unwritten or overflow)", i, k, gv)
			}
			maxErr = max(maxErr, math.Abs(wv-gv))
			maxRef = max(maxRef, math.Abs(wv))
		}
		tol := 1e-5 * max(maxRef, 1)
		if ot.DType == graph.BF16 {
			tol = 1e-2 * max(maxRef, 1)
		}
		if c.tol > 0 {
			tol = c.tol * max(maxRef, 1)
		}
		if maxErr > tol {
			t.Errorf("result %d: max abs error %.3g (largest |ref| %.3g, tolerance %.3g)", i, maxErr, maxRef, tol)
		} else if testing.Verbose() {
			t.Logf("result %d: max abs error %.3g, %.3g of the largest |ref| %.3g", i, maxErr, maxErr/max(maxRef, 1e-30), maxRef)
		}
	}
}

func denseOperand(addr uint64, dt graph.DType, shape []int) gpu.Operand {
	code, _ := gpu.DTypeCode(dt)
	return gpu.Operand{Addr: addr, W: kernels.Weight{Data: addr, DType: code}, DType: dt, Shape: shape}
}

// runOnGPU launches a case the way a plan would: the op as one kernel when the GPU
// lowering supports it for these operands, else its expansion (what expand-for-backend
// makes of it), or attention's split form; each dispatch through gpu.CUDA.Lower, in
// order, with fresh outputs (or the aliased input, for in-place state updates). It
// returns the case's result operands.
func runOnGPU(g *device, c opCase, in []gpu.Operand, alloc func(graph.Type) (gpu.Operand, error), steps uint64) ([]gpu.Operand, error) {
	gr := graph.New(c.op)
	b := graph.NewBuilder(gr, ops.Default)
	vals := map[*graph.Value][]gpu.Operand{}
	srcs := make([]*graph.Value, len(c.in))
	for i, tns := range c.in {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(tns), nil)
		vals[srcs[i]] = []gpu.Operand{in[i]}
	}
	root := b.Op(c.op, c.attrs, srcs...)
	results := []*graph.Value{root}
	switch {
	case c.splits > 0:
		attrs := c.blocks.Attrs()
		attrs["scale"], attrs["splits"], attrs["key_block"] = c.attrs.Float("scale"), int64(c.splits), int64(kernels.AttnKeyBlock)
		for _, mark := range []string{gpu.AttrPrefillTiled, gpu.AttrMMAAttention, gpu.AttrFA2Attention, gpu.AttrMMADecodeAttention, gpu.AttrStagedDecodeAttention} {
			if v, ok := c.attrs[mark]; ok {
				attrs[mark] = v // as split-attention carries the one and mma-attention sets the other
			}
		}
		part := b.Op("attention_partial", attrs, srcs...)
		results = []*graph.Value{b.Op("attention_merge", c.blocks.Attrs(), part)}
	default:
		ins, outs := make([]gpu.Operand, len(in)), []gpu.Operand{}
		copy(ins, in)
		elems := root.Type.Elems
		if len(elems) == 0 {
			elems = []graph.Type{root.Type}
		}
		for _, t := range elems {
			outs = append(outs, gpu.Operand{Addr: 1 << 40, DType: t.DType, Shape: t.Shape.Eval(graph.Bindings{})})
		}
		if !gpu.CUDA.Supports(c.op, c.attrs, ins, outs) {
			ex, err := ops.ExpandElems(b, root)
			if err != nil {
				return nil, err
			}
			results = ex
		}
	}
	if err := b.Err(); err != nil {
		return nil, err
	}
	aliasOf := func(v *graph.Value, elem int) (gpu.Operand, bool) {
		// An in-place state update writes the state arg it was given.
		if v == root || len(results) == 1 && v == results[0] {
			if j, ok := c.alias[elem]; ok {
				return in[j], true
			}
		}
		return gpu.Operand{}, false
	}
	for _, v := range gr.Values {
		if _, done := vals[v]; done || v.Op == "input" {
			continue
		}
		if v == root && (c.splits > 0 || len(results) != 1 || results[0] != root) {
			continue // replaced by its split or expanded form
		}
		args := make([]gpu.Operand, len(v.Args))
		for i, a := range v.Args {
			args[i] = vals[a][0]
		}
		switch v.Op {
		case "reshape":
			o := args[0]
			o.Shape = v.Type.Shape.Eval(graph.Bindings{})
			vals[v] = []gpu.Operand{o}
			continue
		case graph.OpSelect:
			vals[v] = []gpu.Operand{vals[v.Args[0]][v.Attrs.Int("index")]}
			continue
		}
		elems := v.Type.Elems
		if len(elems) == 0 {
			elems = []graph.Type{v.Type}
		}
		outs := make([]gpu.Operand, len(elems))
		for range max(c.launches, 1) {
			for i, t := range elems {
				if o, ok := aliasOf(v, i); ok {
					outs[i] = o
					continue
				}
				o, err := alloc(t)
				if err != nil {
					return nil, err
				}
				outs[i] = o
			}
			d := &plan.Dispatch{Op: v.Op, Attrs: v.Attrs}
			l, err := gpu.CUDA.Lower(d, args, outs, steps)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.Op, err)
			}
			ln, err := g.newLaunch(l.Kernel, l.Grid, l.Block, l.Args, l.ArgsPointer())
			if err != nil {
				return nil, err
			}
			if err := g.run(ln); err != nil {
				return nil, err
			}
		}
		vals[v] = outs
	}
	var out []gpu.Operand
	for _, r := range results {
		out = append(out, vals[r]...)
	}
	return out, nil
}
