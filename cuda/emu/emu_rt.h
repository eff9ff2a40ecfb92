// CPU emulation of the CUDA builtins that ops/kernels/prelude_cuda.h uses, so the CUDA
// translation unit (prelude, args header, kernels) compiles unchanged with g++. Blocks run
// one after another on the calling thread; the threads of a block are fibers switched at
// barriers and warp shuffles (libcuda.cpp).
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstring>
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct emu_dim3 { unsigned x, y, z; };
extern "C" emu_dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
extern "C" void emu_syncthreads(void);
extern "C" void emu_syncwarp(void);
extern "C" unsigned long long emu_shfl_raw(unsigned long long v, int src, int xor_mode);
// PISTIL_EMU tells the kernels that inline PTX is not available: the tensor-core kernels
// (matmul_mma.k) call emu_mma_m16n8k16_bf16 instead of mma.sync.
#define PISTIL_EMU 1
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 as a warp collective: every lane
// of the warp passes its a (4 registers), b (2) and c (4) fragments and gets its d (4).
extern "C" void emu_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b, const float* c);
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 likewise (matmul_mma.k's q4 kernels, MMA_F16).
extern "C" void emu_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b, const float* c);
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 likewise (attention_mma.k).
extern "C" void emu_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b, const float* c);
// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 likewise (matvec_mma.k's integer twins).
extern "C" void emu_mma_m16n8k32_u8s8(int* d, const unsigned* a, const unsigned* b, const int* c);
// A kernel's PZ_EMU_CHECK that failed (prelude_cuda.h): prints what and the line, aborts.
extern "C" void emu_check_failed(const char* what, int line);
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __syncthreads() emu_syncthreads()
#define __syncwarp() emu_syncwarp()
#define __threadfence() ((void)0)
#define __ldcg(p) (*(p))
template <class T> static inline T emu_shfl(T v, int src, int x) {
	unsigned long long r = 0; std::memcpy(&r, &v, sizeof(T));
	r = emu_shfl_raw(r, src, x);
	T o; std::memcpy(&o, &r, sizeof(T)); return o;
}
#define __shfl_xor_sync(mask, v, m) emu_shfl((v), (m), 1)
#define __shfl_sync(mask, v, lane) emu_shfl((v), (lane), 0)
template <class T> static inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
#include <math.h>
extern "C" void emu_run_grid(void (*body)(const void*), const void* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx);
