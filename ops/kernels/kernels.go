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
package kernels

import (
	"embed"
	"strings"
)

//go:embed *.k prelude_cuda.h
var files embed.FS

// Families are the kernel files in the order they are concatenated (helpers first).
var Families = []string{"common", "norm", "matmul", "attention", "conv", "deltanet", "elementwise", "moe"}

// Kernel names (the KERNEL declarations of the .k files).
const (
	KernelEmbed             = "embed"
	KernelDequant           = "dequant"
	KernelMatmulRows        = "matmul_rows"
	KernelMatvecQ4          = "matvec_q4"
	KernelExpertMVQ4        = "expert_matvec_q4"
	KernelExpertMVSwiGLUQ4  = "expert_matvec_swiglu_q4"
	KernelExpertMVCombineQ4 = "expert_matvec_combine_q4"
	KernelMatvecFusedQ4     = "matvec_fused_q4"
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
	KernelConv1D            = "conv1d"
	KernelGatedDelta        = "gated_delta"
	KernelGDNGates          = "gdn_gates"
	KernelUnary             = "unary"
	KernelBinary            = "binary"
	KernelSlice             = "slice"
	KernelRouter            = "router"
	KernelMoECombine        = "moe_combine"
	KernelArgmax            = "argmax"
	KernelProbeLayout       = "probe_layout"
)

// Names lists every kernel of the .k files.
var Names = []string{
	KernelEmbed, KernelDequant, KernelMatmulRows, KernelMatvecQ4, KernelExpertMVQ4, KernelExpertMVSwiGLUQ4, KernelExpertMVCombineQ4, KernelMatvecFusedQ4, KernelMatmulTiled, KernelExpertRows, KernelExpertTiled,
	KernelRMSNorm, KernelL2Norm, KernelGatedRMSNorm, KernelRoPE, KernelKVAppend, KernelAttention, KernelAttentionGQA, KernelAttentionMerge,
	KernelConv1D, KernelGatedDelta, KernelGDNGates, KernelUnary, KernelBinary, KernelSlice, KernelRouter, KernelMoECombine,
	KernelArgmax,
}

// Tuning constants the host needs to launch the kernels (they match the .k #defines).
const (
	MatmulMaxRows = 8   // MM_MAX_ROWS: matmul_rows handles up to this many activation rows
	TileM         = 64  // TILE_M
	TileN         = 64  // TILE_N
	TileK         = 32  // TILE_K: matmul_tiled needs K % TileK == 0
	ExpertTileM   = 128 // ETILE_M: expert_tiled's weight rows per group
	AttnMaxD      = 256 // ATT_MAX_D
	AttnSIMDs     = 8   // ATT_SIMDS: attention_gqa serves up to this many query heads per kv head
	AttnMaxSplits = 64  // ATT_MAX_SPLITS: attention_gqa's most key ranges
	AttnKeyBlock  = 16  // FA_KEYS: attention_gqa's key ranges are whole blocks of this many keys
	ConvMaxK      = 8   // CONV_MAX_K
	DeltaMaxDk    = 128 // DELTA_LANES * DELTA_MAX_ROWS
	DeltaLanes    = 8   // DELTA_LANES: gated_delta columns per SIMD group = 32 / DeltaLanes
	MatvecThreads = 128 // MV_THREADS: the q4 matrix-vector kernels' group size
	MatvecRows    = 4   // MV_ROWS: rows per row group of the q4 matrix-vector kernels
	RouterMaxE    = 512 // ROUTER_MAX_E
	RouterMaxK    = 32  // ROUTER_MAX_K
)

// Family returns the dialect source of one family file.
func Family(name string) (string, error) {
	b, err := files.ReadFile(name + ".k")
	return string(b), err
}

// Dialect is every family's source, concatenated in order, without a prelude.
func Dialect() string {
	var b strings.Builder
	for _, f := range Families {
		src, err := Family(f)
		if err != nil {
			panic("kernels: embedded family missing: " + f) // the embed pattern guarantees them
		}
		b.WriteString("// ---- " + f + ".k\n")
		b.WriteString(src)
	}
	return b.String()
}

// CUDASource is the whole translation unit NVRTC compiles: the CUDA prelude, the
// generated args header, the kernels and the layout probe.
func CUDASource() string {
	prelude, err := files.ReadFile("prelude_cuda.h")
	if err != nil {
		panic("kernels: embedded prelude missing")
	}
	return string(prelude) + CDecls() + Dialect() + ProbeSource()
}

// MatvecRowsPerGroup is how many output rows one group of the q4 matrix-vector kernels
// computes for inner dimension K (mv_lanes in matmul.k: row groups of the largest power
// of two <= min(K/32, MatvecThreads) threads, MatvecRows rows each).
func MatvecRowsPerGroup(K int) int {
	lanes := MatvecThreads
	for lanes > 1 && lanes > K/32 {
		lanes >>= 1
	}
	return MatvecThreads / lanes * MatvecRows
}
