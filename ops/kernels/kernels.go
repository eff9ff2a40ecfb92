// Package kernels holds the GPU kernels in one portable dialect (*.k, one file per op
// family), the per-backend preludes that map the dialect to CUDA C++ (NVRTC) or Metal,
// and the kernel argument structs (args.go), defined once in Go and generated for C.
//
// The dialect: KERNEL(name, Args) / KERNEL_BOUNDED(name, Args, threads) declare a kernel
// that takes one args struct `a` by value; buffers are u64 device addresses read through
// PTR(T, addr); DEVICE marks helpers; TG_MEM declares group (shared) memory, TG_PTR(T)
// points into it; BARRIER() synchronises a group; THREAD_ID, GROUP_SIZE, GROUP_ID_X/Y/Z,
// NUM_GROUPS_X, LANE, SIMD_ID, NUM_SIMDS, SIMD_WIDTH (32) locate a thread; SIMD_SUM,
// SIMD_MAX, SIMD_XOR, SIMD_BROADCAST work across a SIMD group; EXPF, SQRTF, POWF, COSF,
// SINF, LOG1PF, FMAXF, NEG_INF are the float maths; bf16_to_f32, f32_to_bf16, f16_to_f32
// convert; scalar types are u64 i64 i32 u32 u16 u8 f32, vectors vec4u vec4f.
//
// MSL has no global thread index: a kernel receives its position as parameters. So a
// DEVICE helper that reads THREAD_ID, LANE, SIMD_ID, NUM_SIMDS or GROUP_SIZE declares
// CTX_ before its first parameter and is called with CTX_ARG_ before its first argument
// (both expand to nothing on CUDA). Sizes that differ per backend (FA_KEYS,
// EXPERT_SLOTS) come from the backend's Tuning.
package kernels

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.k prelude_cuda.h prelude_metal.h msl_model.h
var files embed.FS

// Families are the portable kernel files, in the order they are concatenated (helpers
// first): every backend compiles them.
var Families = []string{"common", "norm", "matmul", "attention", "conv", "deltanet", "elementwise", "moe", "sample"}

// CUDAFamilies are kernel files only the CUDA source carries, after the portable ones
// (whose helpers they use): kernels for hardware the dialect does not abstract (the
// tensor-core mma GEMM), each beside a portable kernel that does the same work.
var CUDAFamilies = []string{"matmul_mma", "matvec_mma", "attention_mma", "moe_cuda", "deltanet_cuda"}

// Kernel names (the KERNEL declarations of the .k files).
const (
	KernelEmbed             = "embed"
	KernelDequant           = "dequant"
	KernelMatmulRows        = "matmul_rows"
	KernelMatvecQ4          = "matvec_q4"
	KernelMatvecQ8          = "matvec_q8"
	KernelMatvecQ8Norm      = "matvec_q8_norm"
	KernelMatvecQ4Rows      = "matvec_q4_rows"
	KernelExpertMVQ4        = "expert_matvec_q4"
	KernelExpertMVGatherQ4  = "expert_matvec_gather_q4"
	KernelExpertMVSwiGLUQ4  = "expert_matvec_swiglu_q4"
	KernelExpertMVCombineQ4 = "expert_matvec_combine_q4"
	KernelMatvecFusedQ4     = "matvec_fused_q4"
	KernelGatedNormMVQ4     = "gated_rms_norm_matvec_q4"
	KernelMatmulTiled       = "matmul_tiled"
	KernelExpertRows        = "expert_rows"
	KernelExpertTiled       = "expert_tiled"
	KernelRMSNorm           = "rms_norm"
	KernelL2Norm            = "l2_norm"
	KernelGatedRMSNorm      = "gated_rms_norm"
	KernelRoPE              = "rope"
	KernelKVAppend          = "kv_append"
	KernelAttention         = "attention"
	KernelAttentionGQA      = "attention_gqa"
	KernelAttentionMerge    = "attention_merge"
	KernelAttentionPrefill  = "attention_prefill"
	KernelConv1D            = "conv1d"
	KernelGatedDelta        = "gated_delta"
	KernelGDNGates          = "gdn_gates"
	KernelUnary             = "unary"
	KernelBinary            = "binary"
	KernelSlice             = "slice"
	KernelRouter            = "router"
	KernelMoECombine        = "moe_combine"
	KernelArgmax            = "argmax"
	KernelSample            = "sample"
	KernelProbeLayout       = "probe_layout"
	KernelGatedDeltaStep    = "gated_delta_step"
	KernelConvStateShift    = "conv_state_shift"
	KernelGatedDeltaNorm    = "gated_delta_norm"

	// CUDA only (CUDAFamilies).
	KernelMatmulMMA       = "matmul_mma"
	KernelMatmulMMASplitK = "matmul_mma_splitk"
	KernelExpertMMA16     = "expert_mma16"
	KernelExpertMMA32     = "expert_mma32"
	KernelExpertMMA64     = "expert_mma64"
	KernelExpertMMASplitK = "expert_mma_splitk"
	// The wide tiles (the mma-wide-rows pass): MMAWideTileM weight rows x MMAWideTileN
	// tokens, or routed rows of one expert.
	KernelMatmulMMAWide = "matmul_mma_wide"
	KernelExpertMMA32W  = "expert_mma32w"
	// The same for q4 weights alone (MMAQ4Kernel).
	KernelMatmulMMAQ4       = "matmul_mma_q4"
	KernelMatmulMMASplitKQ4 = "matmul_mma_splitk_q4"
	KernelMatmulMMAWideQ4   = "matmul_mma_wide_q4"
	KernelExpertMMA32WQ4    = "expert_mma32w_q4"
	// attention_prefill on the tensor cores (attention_mma.k).
	KernelAttentionPrefillMMA = "attention_prefill_mma"
	// attention_gqa on the tensor cores (attention_mma.k): decode's, and any untiled step's.
	KernelAttentionGQAMMA = "attention_gqa_mma"
	// KernelAttentionGQAStaged is attention_gqa_mma for a decode step with its key tiles
	// copied into group memory by cp.async, four tiles ahead, the rows earlier steps wrote
	// before the programmatic-launch wait (the staged-decode-attention pass).
	KernelAttentionGQAStaged = "attention_gqa_staged"
	// KernelAttentionPrefillFA2 is attention_prefill_mma over a bf16 cache with whole query
	// rows a warp, FlashAttention-2's form (the fa2-attention pass).
	KernelAttentionPrefillFA2 = "attention_prefill_fa2"
	KernelExpertMMA16Q4       = "expert_mma16_q4"
	KernelExpertMMA32Q4       = "expert_mma32_q4"
	KernelExpertMMA64Q4       = "expert_mma64_q4"
	KernelExpertMMASplitKQ4   = "expert_mma_splitk_q4"

	// The decode matrix-vector products on the tensor cores (matvec_mma.k), each the twin
	// of a SIMT kernel of the same arguments (MMAMatvecTwin).
	KernelMatvecMMAQ4               = "matvec_mma_q4"
	KernelMatvecFusedMMAQ4          = "matvec_fused_mma_q4"
	KernelExpertMVSwiGLUMMAQ4       = "expert_matvec_swiglu_mma_q4"
	KernelExpertMVSwiGLUSharedMMAQ4 = "expert_matvec_swiglu_shared_mma_q4"
	// The same on the integer mma (IMMAMatvecTwin).
	KernelMatvecIMMAQ4               = "matvec_imma_q4"
	KernelMatvecFusedIMMAQ4          = "matvec_fused_imma_q4"
	KernelExpertMVSwiGLUIMMAQ4       = "expert_matvec_swiglu_imma_q4"
	KernelExpertMVSwiGLUSharedIMMAQ4 = "expert_matvec_swiglu_shared_imma_q4"
	// The same with each group's weight tile staged in group memory (StagedMatvecTwin).
	KernelMatvecStagedQ4               = "matvec_staged_q4"
	KernelMatvecFusedStagedQ4          = "matvec_fused_staged_q4"
	KernelMatvecFusedNormStagedQ4      = "matvec_fused_norm_staged_q4"
	KernelExpertMVSwiGLUStagedQ4       = "expert_matvec_swiglu_staged_q4"
	KernelExpertMVSwiGLUSharedStagedQ4 = "expert_matvec_swiglu_shared_staged_q4"
	// The router's q8 projection of one token and its routing in one launch (moe_cuda.k,
	// the router-matvec pass): the last group to finish routes.
	KernelRouterQ8 = "router_q8"
	// KernelGatedDeltaChunked is gated_delta in chunks of DeltaChunk tokens (the WY/UT
	// form, deltanet_cuda.k): a prefill step's chain of T recurrent steps becomes T /
	// DeltaChunk chunk steps of small matrix products (the chunked-delta pass).
	KernelGatedDeltaChunked = "gated_delta_chunked"
)

// MMAQ4Kernel maps each tensor-core GEMM kernel to its twin for q4 weights: the same
// arguments, grid and numbers, the weight type fixed when it is compiled, so a lane holds
// a row's two words of codes where the general kernel keeps eight live for any type.
var MMAQ4Kernel = map[string]string{
	KernelMatmulMMA:       KernelMatmulMMAQ4,
	KernelMatmulMMASplitK: KernelMatmulMMASplitKQ4,
	KernelExpertMMA16:     KernelExpertMMA16Q4,
	KernelExpertMMA32:     KernelExpertMMA32Q4,
	KernelExpertMMA64:     KernelExpertMMA64Q4,
	KernelExpertMMASplitK: KernelExpertMMASplitKQ4,
	KernelMatmulMMAWide:   KernelMatmulMMAWideQ4,
	KernelExpertMMA32W:    KernelExpertMMA32WQ4,
}

// MMAMatvecTwin maps each q4 matrix-vector kernel that has a tensor-core twin to it: the
// same argument struct and grid y, grid x ceil(M / MMAMatvecRows), MMAThreads,
// 2·MMAThreads or MMAMatvecMaxThreads threads (gpu's mmaMatvecThreads).
var MMAMatvecTwin = map[string]string{
	KernelMatvecQ4:               KernelMatvecMMAQ4,
	KernelMatvecFusedQ4:          KernelMatvecFusedMMAQ4,
	KernelExpertMVSwiGLUQ4:       KernelExpertMVSwiGLUMMAQ4,
	KernelExpertMVSwiGLUSharedQ4: KernelExpertMVSwiGLUSharedMMAQ4,
}

// IMMAMatvecTwin maps each bf16 tensor-core twin to its integer twin: the same
// arguments, grid and group size, the codes as u8 and the activations as three s8 parts
// per k-step in an integer mma (matvec_mma.k, the imma-matvec pass).
var IMMAMatvecTwin = map[string]string{
	KernelMatvecMMAQ4:               KernelMatvecIMMAQ4,
	KernelMatvecFusedMMAQ4:          KernelMatvecFusedIMMAQ4,
	KernelExpertMVSwiGLUMMAQ4:       KernelExpertMVSwiGLUIMMAQ4,
	KernelExpertMVSwiGLUSharedMMAQ4: KernelExpertMVSwiGLUSharedIMMAQ4,
}

// StagedMatvecTwin maps each bf16 tensor-core twin to its staged form: the same
// arguments, grid, group size and products, the group's weight tile copied into group
// memory with cp.async (issued before the programmatic-launch wait where the tile does
// not depend on the router) instead of each warp's loads (matvec_mma.k, the
// staged-matvec pass). They take K up to StagedMatvecMaxK.
var StagedMatvecTwin = map[string]string{
	KernelMatvecMMAQ4:               KernelMatvecStagedQ4,
	KernelMatvecFusedMMAQ4:          KernelMatvecFusedStagedQ4,
	KernelExpertMVSwiGLUMMAQ4:       KernelExpertMVSwiGLUStagedQ4,
	KernelExpertMVSwiGLUSharedMMAQ4: KernelExpertMVSwiGLUSharedStagedQ4,
}

// StagedMatvecRows is the weight rows a staged twin's group takes for a launch of this
// many weights per group and K: two row tiles (32) of one weight when K is at most
// StagedMatvecMaxK(2), so each step's activations serve both (MVS_PAIR_K), else one.
func StagedMatvecRows(weights, K int) int {
	if weights == 1 && K <= StagedMatvecMaxK(2) {
		return 2 * MMAMatvecRows
	}
	return MMAMatvecRows
}

// StagedMatvecMaxK is the widest K a staged twin takes for a launch of this many weights
// per group (1, or 2 for the SwiGLU kernels' gate and up): MVS_MAX_K.
func StagedMatvecMaxK(weights int) int {
	if weights == 1 {
		return 4096
	}
	return 2048
}

// The shared expert as one more slot of the routed experts' decode kernels
// (fuse-shared-expert).
const (
	KernelExpertMVSwiGLUSharedQ4  = "expert_matvec_swiglu_shared_q4"
	KernelExpertMVCombineSharedQ4 = "expert_matvec_combine_shared_q4"
	// The routing in the experts' kernel (fuse-expert-routing).
	KernelExpertMVSwiGLURoutedQ4 = "expert_matvec_swiglu_routed_q4"
	// MatvecCombineSharedThreads (MVCS_THREADS) is the largest group of
	// expert_matvec_combine_shared_q4.
	MatvecCombineSharedThreads = 256
)

// Names lists every kernel of the .k files.
var Names = []string{
	KernelEmbed, KernelDequant, KernelMatmulRows, KernelMatvecQ4, KernelMatvecQ8, KernelMatvecQ8Norm, KernelMatvecQ4Rows, KernelExpertMVQ4, KernelExpertMVGatherQ4, KernelExpertMVSwiGLUQ4, KernelExpertMVCombineQ4, KernelMatvecFusedQ4, KernelGatedNormMVQ4, KernelMatmulTiled, KernelExpertRows, KernelExpertTiled,
	KernelRMSNorm, KernelL2Norm, KernelGatedRMSNorm, KernelRoPE, KernelKVAppend, KernelAttention, KernelAttentionGQA, KernelAttentionMerge, KernelAttentionPrefill,
	KernelConv1D, KernelGatedDelta, KernelGDNGates, KernelUnary, KernelBinary, KernelSlice, KernelRouter, KernelMoECombine,
	KernelArgmax, KernelSample, KernelGatedDeltaStep, KernelConvStateShift, KernelGatedDeltaNorm,
	KernelExpertMVSwiGLUSharedQ4, KernelExpertMVCombineSharedQ4, KernelExpertMVSwiGLURoutedQ4,
}

// CUDANames lists the kernels of CUDAFamilies.
var CUDANames = []string{KernelMatmulMMA, KernelMatmulMMASplitK, KernelExpertMMA16, KernelExpertMMA32, KernelExpertMMA64, KernelExpertMMASplitK,
	KernelMatmulMMAQ4, KernelMatmulMMASplitKQ4, KernelExpertMMA16Q4, KernelExpertMMA32Q4, KernelExpertMMA64Q4, KernelExpertMMASplitKQ4,
	KernelMatmulMMAWide, KernelExpertMMA32W, KernelMatmulMMAWideQ4, KernelExpertMMA32WQ4,
	KernelMatvecMMAQ4, KernelMatvecFusedMMAQ4, KernelExpertMVSwiGLUMMAQ4, KernelExpertMVSwiGLUSharedMMAQ4,
	KernelMatvecIMMAQ4, KernelMatvecFusedIMMAQ4, KernelExpertMVSwiGLUIMMAQ4, KernelExpertMVSwiGLUSharedIMMAQ4,
	KernelMatvecStagedQ4, KernelMatvecFusedStagedQ4, KernelMatvecFusedNormStagedQ4, KernelExpertMVSwiGLUStagedQ4, KernelExpertMVSwiGLUSharedStagedQ4,
	KernelAttentionPrefillMMA, KernelAttentionGQAMMA, KernelAttentionGQAStaged, KernelAttentionPrefillFA2, KernelRouterQ8, KernelGatedDeltaChunked}

// DynamicGroupMemory is the group memory a CUDA-only kernel takes at launch instead of
// declaring it (a static declaration holds at most 48 KB) on a GPU that gives a group at
// most limit bytes: the host raises each such kernel's limit once and passes the bytes
// with every launch; 0 for the others. attention_prefill_mma takes tiles of two m16 of
// keys where the two-tile memory fits the limit, of one elsewhere (it reads which from
// the bytes it is given).
func DynamicGroupMemory(name string, limit int) int {
	switch name {
	case KernelAttentionPrefillMMA:
		if two := AttnMMAGroupMemoryFor(2); two <= limit {
			return two
		}
		return AttnMMAGroupMemoryFor(1)
	case KernelAttentionGQAStaged:
		return AttnStagedGroupMemory
	case KernelAttentionPrefillFA2:
		return AttnFA2GroupMemory
	case KernelGatedDeltaChunked:
		return DeltaChunkGroupMemory
	}
	return 0
}

// AttnMMAGroupMemoryFor is attention_prefill_mma's dynamic group memory with key tiles of
// keyTiles m16 (AM_SMEM_FLOATS(KT)·4): two K and two V tiles of rows padded to the
// widest head (ATT_MAX_D + AM_KPAD, + AM_VPAD), the warps' partial scores (rows of the
// keys + 4), P (rows of AM_ROWS + 8) and each row's rescale factor and sum. 91,904
// bytes for one, 179,456 for two.
func AttnMMAGroupMemoryFor(keyTiles int) int {
	const maxD, rows, warps = 256, 16 * AttnMMAHalves, 256 / 32
	keys := 16 * keyTiles
	return 4 * (2*keys*(maxD+16) + 2*keys*(maxD+8) + warps*rows*(keys+4) + keys*(rows+8) + 2*rows)
}

// NamesFor lists every kernel a backend's source declares.
func NamesFor(backend string) []string {
	if backend == "cuda" {
		return append(append([]string(nil), Names...), CUDANames...)
	}
	return Names
}

// Tuning constants the host needs to launch the kernels (they match the .k #defines).
const (
	MatmulMaxRows         = 8      // MM_MAX_ROWS: matmul_rows handles up to this many activation rows
	TileM                 = 64     // TILE_M
	TileN                 = 64     // TILE_N
	TileK                 = 32     // TILE_K: matmul_tiled needs K % TileK == 0
	ExpertTileM           = 128    // ETILE_M: expert_tiled's weight rows per group
	MMAThreads            = 128    // MMA_THREADS: the mma kernels' group size
	AttnMMAHalves         = 2      // AM_HALVES: attention_prefill_mma's group is AttnMMAHalves·D threads
	AttnGQAMMAHeads       = 8      // AD_HEADS: attention_gqa_mma serves up to this many query heads per kv head
	AttnStagedGroupMemory = 139264 // AS_SMEM_BYTES: attention_gqa_staged's dynamic group memory (four float32 key tiles and the partial scores)
	AttnFA2Rows           = 128    // FA_ROWS: attention_prefill_fa2's query rows (token, head) a group, 16 a warp
	AttnFA2Threads        = 256    // FA_THREADS: its group size
	AttnFA2GroupMemory    = 202752 // FA_SMEM_BYTES(256): its dynamic group memory (q's bf16 hi and lo parts for its rows, a K and a V tile of 64 keys, rows of 264 bf16)
	MMATileM              = 64     // MMA_TM: matmul_mma's weight rows per group
	MMATileN              = 64     // MMA_TN: matmul_mma's activation rows per group
	MMAWideTileM          = 128    // MMA_WIDE_TM: matmul_mma_wide's and expert_mma32w's weight rows per group
	MMAWideTileN          = 32     // MMA_WIDE_TN: their activation (routed) rows per group
	MMASplitKTileM        = 32     // MMA_SK_M: matmul_mma_splitk's weight rows per group
	MMASplitKTileN        = 16     // MMA_SK_N: matmul_mma_splitk's activation rows per group
	MMAMatvecRows         = 16     // MVM_ROWS: the tensor-core matrix-vector kernels' weight rows per group
	MMAMatvecMaxThreads   = 512    // MVM_MAX_WARPS · 32: their largest group (MMAThreads the smallest)
	AttnMaxD              = 256    // ATT_MAX_D
	AttnSIMDs             = 8      // ATT_SIMDS: attention_gqa serves up to this many query heads per kv head
	AttnMaxSplits         = 64     // attention_gqa's most key ranges of the equal-length split
	AttnMaxRanges         = 512    // ATT_MAX_RANGES: attention_merge's most ranges (the fixed-block split's)
	AttnKeyBlock          = 16     // ATT_KEY_BLOCK: attention_gqa's key ranges are whole blocks of this many keys
	ConvMaxK              = 8      // CONV_MAX_K
	ConvTokenSlices       = 8      // conv1d's most SIMD groups per group, each over a slice of the tokens
	SIMDWidth             = 32     // SIMD_WIDTH
	DeltaMaxDk            = 128    // DELTA_LANES * DELTA_MAX_ROWS
	DeltaLanes            = 8      // DELTA_LANES: gated_delta columns per SIMD group = 32 / DeltaLanes
	DeltaChunk            = 64     // GDC_C: gated_delta_chunked's tokens a chunk
	DeltaChunkColumns     = 32     // GDC_DC: its state columns a group
	DeltaChunkThreads     = 256    // GDC_THREADS: its group size
	DeltaChunkGroupMemory = 138240 // GDC_SMEM_FLOATS·4 of its largest variant (GDC_MMA's padded strides; 130,560 without): its dynamic group memory (the chunk's k and q rows, the state columns, A, Q Kᵀ, V' and T's diagonal blocks)
	DeltaNormMaxDv        = 128    // DELTA_NORM_MAX_DV: gated_delta_norm's group is 32·ceil(Dv/4) threads, at most 1,024
	MatvecThreads         = 128    // MV_THREADS: the q4 matrix-vector kernels' group size
	MatvecRows            = 4      // MV_ROWS: rows per row group of the q4 matrix-vector kernels
	MatvecQ8Rows          = 2      // MV8_ROWS: rows per group of matvec_q8
	MatvecQ8NormMaxK      = 2048   // MV8_NORM_MAX_K: matvec_q8_norm's widest row, one 16-element chunk per thread
	MatvecBatchRows       = 8      // MVB_ROWS: activation rows per weight load of matvec_q4_rows and expert_matvec_gather_q4
	RouterMaxE            = 512    // ROUTER_MAX_E
	RouterMaxK            = 32     // ROUTER_MAX_K
	// SampleThreads (SAMPLE_THREADS) is the sample kernel's group size, and
	// SampleCandidates (SAMPLE_CANDIDATES) the most candidates it sorts for top-p
	// (exec.TopPCandidates).
	SampleThreads    = 1024
	SampleCandidates = 1024
)

// AttnPrefillRows (AP_ROWS) is how many consecutive tokens of one query head a SIMD group
// of attention_prefill serves: a group takes a tile of AttnPrefillRows * AttnSIMDs /
// (NH/KVH) tokens of one kv head.
const AttnPrefillRows = 4

// Family returns the dialect source of one family file.
func Family(name string) (string, error) {
	b, err := files.ReadFile(name + ".k")
	return string(b), err
}

// Dialect is every portable family's source, concatenated in order, without a prelude.
func Dialect() string { return concat(Families) }

// CUDADialect is the CUDA-only families' source (after Dialect in the CUDA source).
func CUDADialect() string { return concat(CUDAFamilies) }

func concat(families []string) string {
	var b strings.Builder
	for _, f := range families {
		src, err := Family(f)
		if err != nil {
			panic("kernels: embedded family missing: " + f) // the embed pattern guarantees them
		}
		b.WriteString("// ---- " + f + ".k\n")
		b.WriteString(src)
	}
	return b.String()
}

// Tuning holds what differs between backends in the kernels' own sizes: the .k files
// see it as #defines (TuningDecls), the host as these fields. Metal gives a threadgroup
// 32 KiB of memory where CUDA allows 48 KiB of static shared memory.
type Tuning struct {
	Backend string
	// AttnTileKeys (FA_KEYS) is how many keys attention_gqa stages in group memory at a
	// time: a divisor of SIMD_WIDTH and of AttnKeyBlock, so it changes no result.
	AttnTileKeys int32
	// ExpertSlots (EXPERT_SLOTS) is how many routed slots expert_tiled and
	// expert_matvec_gather_q4 gather at a time.
	ExpertSlots int32
	// CombineRows (MVC_ROWS) is the output rows a group of the experts' down-projection
	// combines (expert_matvec_combine_q4, expert_matvec_combine_shared_q4) takes; the GPU
	// targets' CombineRows must agree. On the H200 4 decoded 356.2 tok/s against 343.1
	// with 8 and 303.9 with 16 (cuda/README.md); Metal keeps the 8 it was checked with.
	CombineRows int32
	// GroupMemoryLimit is the most group (threadgroup, shared) memory a kernel may declare.
	GroupMemoryLimit int
}

// Conv1DGeometry is conv1d's launch for a step of T tokens over Ch channels (conv.k): a
// multi-token step has groups of SIMDWidth channels x up to ConvTokenSlices slices of the
// tokens, one SIMD group each; a decode step groups of 4 x SIMDWidth channels, one token.
func Conv1DGeometry(T, Ch int) (groups, threads int, slices int32) {
	if T <= 1 {
		return (Ch + 4*SIMDWidth - 1) / (4 * SIMDWidth), 4 * SIMDWidth, 1
	}
	s := min(T, ConvTokenSlices)
	return (Ch + SIMDWidth - 1) / SIMDWidth, SIMDWidth * s, int32(s)
}

// CUDA and Metal are the two backends' tunings.
var (
	CUDA  = Tuning{Backend: "cuda", AttnTileKeys: 16, ExpertSlots: 4096, CombineRows: 4, GroupMemoryLimit: 48 << 10}
	Metal = Tuning{Backend: "metal", AttnTileKeys: 8, ExpertSlots: 2048, CombineRows: 8, GroupMemoryLimit: 32 << 10}
)

// TuningDecls is the #define block of a backend's tuning.
func TuningDecls(t Tuning) string {
	return fmt.Sprintf("// Tuning of the %s backend (kernels.Tuning); do not edit.\n#define FA_KEYS %d\n#define EXPERT_SLOTS %d\n#define MVC_ROWS %d\n",
		t.Backend, t.AttnTileKeys, t.ExpertSlots, t.CombineRows)
}

func embedded(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("kernels: embedded file missing: " + name) // the embed pattern guarantees it
	}
	return string(b)
}

// CUDASource is the whole translation unit NVRTC compiles: the CUDA prelude, the
// backend's tuning, the generated args header, the portable kernels, the CUDA-only ones
// and the layout probe.
func CUDASource() string {
	return embedded("prelude_cuda.h") + TuningDecls(CUDA) + CDecls() + Dialect() + CUDADialect() + ProbeSource()
}

// MSLModel is msl_model.h: the MSL built-ins as clang C++, with which MetalSource is
// type-checked (-DPZ_CHECK) and emulated (-DPZ_EMU) on machines without Apple's compiler.
func MSLModel() string { return embedded("msl_model.h") }

// MetalPrelude is prelude_metal.h, the dialect in MSL.
func MetalPrelude() string { return embedded("prelude_metal.h") }

// MetalSource is the whole MSL library the Metal backend compiles (language version 3.1,
// safe math): the Metal prelude, the backend's tuning, the args header, the kernels and
// the layout probe.
func MetalSource() string {
	return MetalPrelude() + TuningDecls(Metal) + CDecls() + Dialect() + ProbeSource()
}

// Source is the complete source a backend ("cuda" or "metal") compiles.
func Source(backend string) (string, error) {
	switch backend {
	case "cuda":
		return CUDASource(), nil
	case "metal":
		return MetalSource(), nil
	}
	return "", fmt.Errorf("no kernel source for backend %q (want cuda or metal)", backend)
}

// MatvecRowsPerGroup is how many output rows one group of the q4 matrix-vector kernels
// computes for inner dimension K (mv_lanes in matmul.k: row groups of the largest power
// of two <= min(K/32, MatvecThreads) threads, MatvecRows rows each).
func MatvecRowsPerGroup(K int) int { return MatvecThreads / MatvecLanes(K) * MatvecRows }

// MatvecLanes is how many threads of a q4 matrix-vector group share one row group's
// chunks of K (mv_lanes in matmul.k).
func MatvecLanes(K int) int {
	lanes := MatvecThreads
	for lanes > 1 && lanes > K/32 {
		lanes >>= 1
	}
	return lanes
}
