// MSL model: the part of the Metal Shading Language the Metal prelude uses, written as
// clang C++20, so the generated MSL can be checked and run on Linux, where Apple's
// compiler does not exist. Two modes:
//
// PZ_CHECK  type-check only (clang++ -fsyntax-only). device and threadgroup are real
//           clang address spaces, so a pointer of one cannot be passed where the other
//           (or a thread pointer) is wanted; constant is const (clang C++ cannot copy a
//           struct out of an address space, MSL can), so a kernel cannot write its args;
//           threadgroup variables outside a kernel's own scope are errors, as in MSL;
//           only MSL built-ins are declared, and CUDA and libc names are poisoned.
// PZ_EMU    the built-ins implemented by the CPU emulator (ops/kernels/emu: its
//           emu_builtins.h, included here, and emu_runtime.h, included before).
//
// It cannot check: the constant address space itself, that MSL rejects unqualified
// pointer parameters, attribute spelling ([[buffer(0)]] and the position attributes are
// ignored), casts between address spaces, MSL version gating, or anything Apple's
// compiler alone diagnoses.
#define PZ_MODEL 1

#if defined(PZ_CHECK)
#define device __attribute__((address_space(1)))
#define threadgroup __attribute__((address_space(3)))
#define PZ_KERNEL_SCOPE_PARAM , int pz_kernel_scope
// A threadgroup variable names the kernel-only parameter, so one in a helper fails.
#define PZ_TG_STORAGE (void)pz_kernel_scope; static
#elif defined(PZ_EMU)
#define device
#define threadgroup
// Groups run one at a time in the emulator, so a static is the group's memory.
#define PZ_TG_STORAGE static
#else
#error "define PZ_CHECK or PZ_EMU"
#endif
#define constant const
#define thread
#define kernel

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef uint uint2 __attribute__((ext_vector_type(2)));
typedef uint uint3 __attribute__((ext_vector_type(3)));
typedef uint uint4 __attribute__((ext_vector_type(4)));
typedef float float2 __attribute__((ext_vector_type(2)));
typedef float float4 __attribute__((ext_vector_type(4)));
#ifndef INFINITY
#define INFINITY __builtin_inff()
#endif

namespace metal {
template <typename T, typename U> T as_type(U u) {
	static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
	return __builtin_bit_cast(T, u);
}
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
enum memory_order { memory_order_relaxed };
struct atomic_int { int value; };

#if defined(PZ_CHECK)
namespace precise {
float exp(float);
float log(float);
float sqrt(float);
float pow(float, float);
float cos(float);
float sin(float);
}
float fmax(float, float);
bool isinf(float);
void threadgroup_barrier(mem_flags);
void simdgroup_barrier(mem_flags);
float simd_sum(float);
int simd_sum(int);
float simd_max(float);
int simd_max(int);
float simd_shuffle_xor(float, ushort);
int simd_shuffle_xor(int, ushort);
uint simd_shuffle_xor(uint, ushort);
float simd_shuffle(float, ushort);
int simd_shuffle(int, ushort);
uint simd_shuffle(uint, ushort);
int atomic_fetch_add_explicit(threadgroup atomic_int*, int, memory_order);
int atomic_fetch_add_explicit(device atomic_int*, int, memory_order);
#else
#include "emu_builtins.h"
#endif
} // namespace metal
using namespace metal;

#if defined(PZ_CHECK)
// Not MSL: libc maths (MSL spells them exp, precise::exp, ...), libc, and CUDA.
#pragma GCC poison expf logf log1pf log1p sqrtf powf cosf sinf tanf tanhf fmaxf fminf fabsf exp2f erff
#pragma GCC poison printf malloc free memcpy memset
#pragma GCC poison __syncthreads __syncwarp __threadfence threadIdx blockIdx blockDim gridDim
#pragma GCC poison atomicAdd __shfl_xor_sync __shfl_sync __ldcg __float_as_uint __uint_as_float __int_as_float
#pragma GCC poison __global__ __device__ __shared__ __forceinline__ __launch_bounds__
#endif
