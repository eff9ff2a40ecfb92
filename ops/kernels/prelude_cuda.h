// CUDA prelude: maps the portable kernel dialect to CUDA C++ for NVRTC. The kernels
// (*.k) use only these names; a Metal prelude maps the same names to MSL.
typedef unsigned long long u64;
typedef long long i64;
typedef int i32;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef float f32;
typedef uint4 vec4u;
typedef float4 vec4f;

#ifndef offsetof
#define offsetof(T, f) ((u64)(&(((T*)0)->f)))
#endif

// Programmatic dependent launch (sm_90 and later): in a graph whose edges are
// programmatic (pipeline.toml [cuda] programmatic_launch), a kernel may be launched while
// the kernels it depends on still run. Every kernel therefore first waits until those
// have finished and their writes are visible (a no-op for a kernel launched without
// programmatic dependencies), then lets its own dependents be launched: their blocks get
// scheduled while this kernel runs, and wait in turn. This hides the launch gap of each
// dependent stage; the order of every read after its write is unchanged.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PZ_KERNEL_ENTRY() \
	asm volatile("griddepcontrol.wait;" ::: "memory"); \
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define PZ_KERNEL_ENTRY()
#endif

// A measurement, never a setting: PISTIL_CUDA_DEFINES='PZ_SKIP_KERNELS="a,b"' compiles
// the kernels named (or every kernel, "*") as their entry alone, so a step keeps its
// launches, grids and dependencies and loses those kernels' work. The step times with
// every body, with none and with some say what the stages themselves cost and what each
// family of kernels adds (cuda/README.md); the answers of such a step are garbage.
//
// PISTIL_CUDA_DEFINES='PZ_REPEAT_KERNELS="a,b"' runs the bodies of the kernels named twice
// in a row (a barrier between), for kernels whose second run writes what the first did
// (every decode kernel but conv1d and gated_delta, which update their state in place:
// cuda/emu/repeatable.sh). The answers stay right, so the step's routing and data stay those of a
// real step, which a skipped body's garbage does not keep (NaN logits send every token
// to the same experts); the time the second run adds is what the body costs on the step's
// critical path.
#if defined(PZ_SKIP_KERNELS) || defined(PZ_REPEAT_KERNELS)
static __device__ constexpr bool pz_listed(const char* list, const char* name) {
	if (list[0] == '*' && list[1] == 0) return true;
	for (const char* p = list; *p;) {
		const char* n = name;
		while (*n && *p == *n) p++, n++;
		if (*n == 0 && (*p == ',' || *p == 0)) return true;
		while (*p && *p != ',') p++;
		if (*p == ',') p++;
	}
	return false;
}
#endif
#ifdef PZ_SKIP_KERNELS
#define PZ_SKIP_BODY(name) if constexpr (pz_listed(PZ_SKIP_KERNELS, #name)) return;
#else
#define PZ_SKIP_BODY(name)
#endif
#ifdef PZ_REPEAT_KERNELS
#define PZ_REPEAT_BODY(name) if constexpr (pz_listed(PZ_REPEAT_KERNELS, #name)) { name##_body(a); __syncthreads(); }
#else
#define PZ_REPEAT_BODY(name)
#endif

// A kernel takes one args struct by value; buffers are u64 device addresses in it. Its
// body is an inlined function the entry point calls after PZ_KERNEL_ENTRY.
#define KERNEL(name, Args) \
	static __device__ __forceinline__ void name##_body(const struct Args a); \
	extern "C" __global__ void name(const struct Args a) { PZ_KERNEL_ENTRY(); PZ_SKIP_BODY(name) PZ_REPEAT_BODY(name) name##_body(a); } \
	static __device__ __forceinline__ void name##_body(const struct Args a)
// KERNEL_BOUNDED also tells the compiler the most threads per group it is launched with.
#define KERNEL_BOUNDED(name, Args, threads) \
	static __device__ __forceinline__ void name##_body(const struct Args a); \
	extern "C" __global__ void __launch_bounds__(threads) name(const struct Args a) { PZ_KERNEL_ENTRY(); PZ_SKIP_BODY(name) PZ_REPEAT_BODY(name) name##_body(a); } \
	static __device__ __forceinline__ void name##_body(const struct Args a)
#define DEVICE static __device__ __forceinline__
// KERNEL_EARLY is KERNEL_BOUNDED without the programmatic-launch wait at entry: its body
// may first read what no kernel writes (the weights: a decode matrix-vector kernel issues
// its tile's copies while the kernels before it finish) and must call pz_grid_wait(),
// every thread, before it reads anything an earlier kernel wrote or writes anything.
// PZ_LATE_LOADS (pipeline.toml [cuda] early_loads = false) compiles every KERNEL_EARLY
// kernel to wait at entry like the others, its early reads then after the wait: the off
// switch of early loads (pz_grid_wait's second wait returns at once).
#ifdef PZ_LATE_LOADS
#define KERNEL_EARLY(name, Args, threads) KERNEL_BOUNDED(name, Args, threads)
#else
#define KERNEL_EARLY(name, Args, threads) \
	static __device__ __forceinline__ void name##_body(const struct Args a); \
	extern "C" __global__ void __launch_bounds__(threads) name(const struct Args a) { PZ_SKIP_BODY(name) PZ_REPEAT_BODY(name) name##_body(a); } \
	static __device__ __forceinline__ void name##_body(const struct Args a)
#endif
DEVICE void pz_grid_wait() { PZ_KERNEL_ENTRY(); }
// PZ_EMU_CHECK(cond, what): under cuda/emu, stops the run naming the kernel's line when
// cond is false; nothing on a GPU. For invariants the emulator cannot otherwise see: it
// runs each launch after the one before, so a read before the programmatic-launch wait
// of what the kernel before writes gets the written value there, never the stale one.
#ifdef PISTIL_EMU
#define PZ_EMU_CHECK(cond, what) \
	do { \
		if (!(cond)) emu_check_failed(what, __LINE__); \
	} while (0)
#else
#define PZ_EMU_CHECK(cond, what) ((void)0)
#endif
// CUDA's thread position is global (threadIdx), so helpers need no thread context.
#define CTX_
#define CTX_ARG_
#define GLOBAL
#define TG_MEM __shared__
// TG_MEM_DYNAMIC declares a kernel's dynamic group memory (CUDA-only kernels, past the
// 48 KB a static declaration holds): `count` elements of T, the bytes the host passes at
// launch (kernels.DynamicGroupMemory); pz_dynamic_group_bytes() is what the launch
// passed. cuda/emu has no launch-sized memory, so there it is a static array of that size.
#ifdef PISTIL_EMU
#define TG_MEM_DYNAMIC(T, name, count) static __attribute__((aligned(16))) T name[count]
#else
// (The launch's dynamic memory starts aligned far past 16 bytes when, as here, the
// kernel declares no static group memory beside it.)
#define TG_MEM_DYNAMIC(T, name, count) extern __shared__ T name[]
DEVICE u32 pz_dynamic_group_bytes() {
	u32 n;
	asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
	return n;
}
#endif
#define TG_PTR(T) T*
#define PTR(T, addr) ((T*)(addr))
#define BARRIER() __syncthreads()

#define THREAD_ID ((i32)threadIdx.x)
#define GROUP_SIZE ((i32)blockDim.x)
#define GROUP_ID_X ((i32)blockIdx.x)
#define GROUP_ID_Y ((i32)blockIdx.y)
#define GROUP_ID_Z ((i32)blockIdx.z)
#define NUM_GROUPS_X ((i32)gridDim.x)
#define SIMD_WIDTH 32
#define LANE (THREAD_ID & 31)
#define SIMD_ID (THREAD_ID >> 5)
#define NUM_SIMDS (GROUP_SIZE >> 5)
#define UNROLL _Pragma("unroll")
#define ATOMIC_ADD_TG(p, v) atomicAdd((p), (v))
#define ATOMIC_ADD_GLOBAL(p, v) atomicAdd((p), (v))
// FENCE_DEVICE orders this thread's global writes before its later ones for every group.
#define FENCE_DEVICE() __threadfence()
// LOAD_COHERENT reads global memory another group wrote in this launch (skips L1).
#define LOAD_COHERENT(p) __ldcg(p)
#define UNROLL4 _Pragma("unroll 4")
#define UNROLL8 _Pragma("unroll 8")

// AS_F32 reinterprets the bits of a u32 as an f32.
#define AS_F32(u) __uint_as_float(u)
// AS_U32 reinterprets the bits of an f32 as a u32.
#define AS_U32(f) __float_as_uint(f)
#define SIMD_BARRIER() __syncwarp()
#define SIMD_XOR(x, m) __shfl_xor_sync(0xffffffffu, (x), (m))
#define SIMD_BROADCAST(x, lane) __shfl_sync(0xffffffffu, (x), (lane))

DEVICE f32 SIMD_SUM(f32 v) {
	for (i32 m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
}
DEVICE f32 SIMD_MAX(f32 v) {
	for (i32 m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
	return v;
}

#define EXPF(x) expf(x)
#define LOG1PF(x) log1pf(x)
#define LOGF(x) logf(x)
#define SQRTF(x) sqrtf(x)
#define POWF(x, y) powf(x, y)
#define COSF(x) cosf(x)
#define SINF(x) sinf(x)
#define FMAXF(x, y) fmaxf(x, y)
#define NEG_INF (-__int_as_float(0x7f800000))

DEVICE f32 bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }
DEVICE u16 f32_to_bf16(f32 f) {
	u32 b = __float_as_uint(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
	b += 0x7fffu + ((b >> 16) & 1u);
	return (u16)(b >> 16);
}
DEVICE f32 f16_to_f32(u16 h) {
	u32 sign = ((u32)(h >> 15)) << 31, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0 && mant == 0) return __uint_as_float(sign);
	if (exp == 0) {
		while ((mant & 0x400u) == 0) { mant <<= 1; exp--; }
		exp++;
		mant &= 0x3ffu;
	} else if (exp == 0x1f) {
		return __uint_as_float(sign | 0x7f800000u | (mant << 13));
	}
	return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}
DEVICE vec4u load_vec4u(u64 addr) { return *PTR(const vec4u, addr); }
DEVICE vec4f load_vec4f(u64 addr) { return *PTR(const vec4f, addr); }
// Out-parameters of helpers: a reference to a thread-local f32, a pointer to thread-local
// f32s (Metal: thread f32&, thread f32*).
#define thread_f32_ref f32&
#define thread_f32_ptr f32*
