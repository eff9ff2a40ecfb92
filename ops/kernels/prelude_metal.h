// Metal prelude: maps the portable kernel dialect to the Metal Shading Language, compiled
// as MSL 3.1 (macOS 14 and later, Apple7 = M1 onwards) with safe math. The kernels rely on
// exp(-inf) = 0, on comparisons with infinity and on accurate sin/cos of large RoPE
// angles, so the host turns fast math off and the maths below name the precise:: forms,
// which no compiler default can relax.
//
// MSL gives a thread its position only as kernel parameters: KERNEL declares them under
// the pz_* names the dialect's THREAD_ID, LANE... read, and a helper that needs them
// declares the same names through CTX_ (called with CTX_ARG_). PZ_MODEL is defined by the
// MSL model header (ops/kernels/msl/) that type-checks and emulates this source on Linux;
// the hooks below are empty for Apple's compiler.
#ifndef PZ_MODEL
#include <metal_stdlib>
using namespace metal;
#endif
#ifndef PZ_KERNEL_SCOPE_PARAM
#define PZ_KERNEL_SCOPE_PARAM
#endif
#ifndef PZ_TG_STORAGE
#define PZ_TG_STORAGE
#endif

typedef ulong u64;
typedef long i64;
typedef int i32;
typedef uint u32;
typedef ushort u16;
typedef uchar u8;
typedef float f32;
typedef uint4 vec4u;
typedef float4 vec4f;

#ifndef offsetof
#define offsetof(T, f) ((u64)__builtin_offsetof(T, f))
#endif

// A kernel takes one args struct in the constant address space at buffer index 0; buffers
// are u64 GPU addresses (MTLBuffer.gpuAddress + offset) in it.
#define PZ_KERNEL_PARAMS(Args) constant Args& a [[buffer(0)]], \
	uint3 pz_gid [[threadgroup_position_in_grid]], uint3 pz_ngroups [[threadgroups_per_grid]], \
	uint pz_tid [[thread_index_in_threadgroup]], uint pz_tgsize [[threads_per_threadgroup]], \
	uint pz_lane [[thread_index_in_simdgroup]], uint pz_simd [[simdgroup_index_in_threadgroup]], \
	uint pz_nsimd [[simdgroups_per_threadgroup]] PZ_KERNEL_SCOPE_PARAM
#define KERNEL(name, Args) kernel void name(PZ_KERNEL_PARAMS(Args))
#define KERNEL_BOUNDED(name, Args, threads) [[max_total_threads_per_threadgroup(threads)]] kernel void name(PZ_KERNEL_PARAMS(Args))
#define DEVICE static inline
// Metal has no programmatic launch: a kernel starts after the ones it depends on, so
// KERNEL_EARLY's reads are early only on CUDA and pz_grid_wait() has nothing to wait for.
#define KERNEL_EARLY(name, Args, threads) KERNEL_BOUNDED(name, Args, threads)
DEVICE void pz_grid_wait() {}
#define CTX_ uint pz_tid, uint pz_tgsize, uint pz_lane, uint pz_simd, uint pz_nsimd,
#define CTX_ARG_ pz_tid, pz_tgsize, pz_lane, pz_simd, pz_nsimd,
#define GLOBAL device
// threadgroup variables may be declared only in a kernel's own scope (MSL rule).
#define TG_MEM PZ_TG_STORAGE threadgroup
#define TG_PTR(T) threadgroup T*
// MSL accepts a C-style cast from a 64-bit integer to a device pointer (not as_type).
#define PTR(T, addr) ((device T*)(addr))
// CUDA's __syncthreads orders global as well as shared memory within a block; so does this.
#define BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device)

#define THREAD_ID ((i32)pz_tid)
#define GROUP_SIZE ((i32)pz_tgsize)
#define GROUP_ID_X ((i32)pz_gid.x)
#define GROUP_ID_Y ((i32)pz_gid.y)
#define GROUP_ID_Z ((i32)pz_gid.z)
#define NUM_GROUPS_X ((i32)pz_ngroups.x)
// Every pipeline is checked for threadExecutionWidth == 32 when it is built.
#define SIMD_WIDTH 32
#define LANE ((i32)pz_lane)
#define SIMD_ID ((i32)pz_simd)
#define NUM_SIMDS ((i32)pz_nsimd)
#define UNROLL _Pragma("clang loop unroll(full)")
#define UNROLL4 _Pragma("clang loop unroll_count(4)")
#define UNROLL8 _Pragma("clang loop unroll_count(8)")
#define ATOMIC_ADD_TG(p, v) atomic_fetch_add_explicit((threadgroup atomic_int*)(p), (v), memory_order_relaxed)
// No ATOMIC_ADD_GLOBAL, FENCE_DEVICE or LOAD_COHERENT: MSL before 3.2 has no device-scope
// fence, so no kernel may read what another threadgroup wrote in the same dispatch (the
// plan splits such work into dispatches, as attention_partial and attention_merge).

// AS_F32 reinterprets the bits of a u32 as an f32.
#define AS_F32(u) as_type<f32>((u32)(u))
// AS_U32 reinterprets the bits of an f32 as a u32.
#define AS_U32(f) as_type<u32>((f32)(f))
#define SIMD_BARRIER() simdgroup_barrier(mem_flags::mem_threadgroup)
#define SIMD_XOR(x, m) simd_shuffle_xor((x), (ushort)(m))
#define SIMD_BROADCAST(x, lane) simd_shuffle((x), (ushort)(lane))
#define SIMD_SUM(v) simd_sum(v)
#define SIMD_MAX(v) simd_max(v)

#define EXPF(x) precise::exp(x)
#define SQRTF(x) precise::sqrt(x)
#define POWF(x, y) precise::pow(x, y)
#define COSF(x) precise::cos(x)
#define SINF(x) precise::sin(x)
#define FMAXF(x, y) fmax(x, y)
#define LOG1PF(x) pz_log1p(x)
#define LOGF(x) precise::log(x)
#define NEG_INF (-INFINITY)

// MSL has no log1p. For u = 1 + x rounded, log(u)·x/(u - 1) is accurate to a few ulps for
// every x > -1 (the rounding error of u cancels in the ratio: Goldberg, "What every
// computer scientist should know about floating-point arithmetic", thm. 4); u == 1 means
// |x| is below half an ulp of 1, where log1p(x) = x to float precision.
DEVICE f32 pz_log1p(f32 x) {
	f32 u = 1.0f + x;
	if (u == 1.0f) return x;
	if (isinf(u)) return u;
	return precise::log(u) * (x / (u - 1.0f));
}

DEVICE f32 bf16_to_f32(u16 h) { return as_type<f32>(((u32)h) << 16); }
DEVICE u16 f32_to_bf16(f32 f) {
	u32 b = as_type<u32>(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (u16)(b >> 16);
}
DEVICE f32 f16_to_f32(u16 h) {
	u32 sign = ((u32)(h >> 15)) << 31, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0 && mant == 0) return as_type<f32>(sign);
	if (exp == 0) {
		while ((mant & 0x400u) == 0) { mant <<= 1; exp--; }
		exp++;
		mant &= 0x3ffu;
	} else if (exp == 0x1f) {
		return as_type<f32>(sign | 0x7f800000u | (mant << 13));
	}
	return as_type<f32>(sign | ((exp + 112) << 23) | (mant << 13));
}
DEVICE vec4u load_vec4u(u64 addr) { return *PTR(const vec4u, addr); }
DEVICE vec4f load_vec4f(u64 addr) { return *PTR(const vec4f, addr); }
// Out-parameters of helpers: a reference to, or a pointer into, the thread's own f32s.
#define thread_f32_ref thread f32&
#define thread_f32_ptr thread f32*
