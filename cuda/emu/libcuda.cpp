// The emulator's libcuda.so: the CUDA driver API calls pistil's cuda package makes, run on
// the CPU. Device memory is host memory; a launch runs its blocks one after another on the
// calling thread, the threads of a block as fibers that switch at __syncthreads,
// __syncwarp and warp shuffles. A CUDA graph replays its kernel nodes in the order they
// were added, or, with EMU_SHUFFLE=seed, in a random order that honours only the graph's
// edges (what concurrent execution may do), and EMU_SCRAMBLE=seed runs each launch's
// blocks, and a block's threads between barriers, in random orders. EMU_TRACE=1 prints each launch; EMU_AUDIT=1
// prints, after each launch, the byte ranges of every allocation of 4 MB or less that the
// launch changed (to check a kernel's writes against its declared results). x86-64 only
// (the fiber switch is assembly).
#include "emu_rt.h"
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <unistd.h>
#include <vector>
#include <chrono>
#include <string>
#include <utility>

extern "C" { emu_dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim; }

extern "C" void emu_swap(void** save, void* load);
asm(R"(
.text
.globl emu_swap
.type emu_swap,@function
emu_swap:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
)");

namespace {
const int kMaxThreads = 1024;
const size_t kStack = 128 << 10;
struct Fiber {
	void* sp;
	unsigned tid;
	bool done;
	int wait; // 0 runnable, 1 warp barrier, 2 block barrier
	unsigned gen;
	unsigned shfl; // shuffles done (parity of the exchange buffer)
	unsigned mma;  // mma collectives done (parity of their exchange buffer)
};
Fiber fibers[kMaxThreads];
char* stacks;
void* sched_sp;
int cur;
int nthreads, live;
int blk_arrived;
unsigned blk_gen;
int warp_live[32], warp_arrived[32];
unsigned warp_gen[32];
unsigned long long xbuf[32][2][32];
void (*g_body)(const void*);
const void* g_args;

void yield_to_sched() { emu_swap(&fibers[cur].sp, sched_sp); }

extern "C" void emu_fiber_entry() {
	g_body(g_args);
	Fiber& f = fibers[cur];
	f.done = true;
	live--;
	int w = f.tid / 32;
	warp_live[w]--;
	if (warp_arrived[w] > 0 && warp_arrived[w] == warp_live[w]) { warp_arrived[w] = 0; warp_gen[w]++; }
	if (blk_arrived > 0 && blk_arrived == live) { blk_arrived = 0; blk_gen++; }
	emu_swap(&f.sp, sched_sp);
	std::abort();
}

void init_fiber(int i) {
	char* top = stacks + (size_t)(i + 1) * kStack;
	top = (char*)((uintptr_t)top & ~(uintptr_t)15);
	void** sp = (void**)top;
	*--sp = nullptr; // alignment slot
	*--sp = (void*)&emu_fiber_entry;
	for (int r = 0; r < 6; r++) *--sp = nullptr;
	fibers[i] = Fiber{sp, (unsigned)i, false, 0, 0, 0, 0};
}
} // namespace

extern "C" void emu_syncthreads(void) {
	Fiber& f = fibers[cur];
	if (++blk_arrived == live) { blk_arrived = 0; blk_gen++; return; }
	f.wait = 2; f.gen = blk_gen;
	yield_to_sched();
}

static void warp_barrier() {
	Fiber& f = fibers[cur];
	int w = f.tid / 32;
	if (++warp_arrived[w] == warp_live[w]) { warp_arrived[w] = 0; warp_gen[w]++; return; }
	f.wait = 1; f.gen = warp_gen[w];
	yield_to_sched();
}

extern "C" void emu_syncwarp(void) { warp_barrier(); }

extern "C" unsigned long long emu_shfl_raw(unsigned long long v, int src, int xor_mode) {
	Fiber& f = fibers[cur];
	int w = f.tid / 32, lane = f.tid % 32;
	int par = f.shfl++ & 1;
	xbuf[w][par][lane] = v;
	warp_barrier();
	int from = xor_mode ? (lane ^ src) : src;
	if (from < 0 || from >= 32) from = lane;
	return xbuf[w][par][from];
}

// The fragments every lane of a warp handed to an mma, double-buffered by parity like the
// shuffles' exchange: a lane can be at most one collective ahead of the slowest.
unsigned mma_a[32][2][32][4], mma_b[32][2][32][2];

// MmaExchange is where a lane finds its warp's fragments after mma_exchange: the warp,
// the lane and the parity of the buffers.
struct MmaExchange { int w, lane, par; };

// mma_exchange hands this lane's A (4 registers) and B (2) fragments to its warp's mma
// and returns once every lane of the warp has (an mma in a warp with exited lanes aborts).
static MmaExchange mma_exchange(const unsigned* a, const unsigned* b) {
	Fiber& f = fibers[cur];
	int w = f.tid / 32, lane = f.tid % 32;
	if (warp_live[w] != 32) { std::fprintf(stderr, "emu: mma in warp %d with %d of 32 lanes live\n", w, warp_live[w]); std::abort(); }
	int par = f.mma++ & 1;
	for (int r = 0; r < 4; r++) mma_a[w][par][lane][r] = a[r];
	for (int r = 0; r < 2; r++) mma_b[w][par][lane][r] = b[r];
	warp_barrier();
	return {w, lane, par};
}

// mma_m16n8k16 is mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32,
// D = A·B + C (elem decodes an element of A or B: its .b32 and its index there), with the
// fragment layout of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type"), groupID = lane / 4, threadID_in_group = lane % 4:
//   A (16x16 row, 4 x .b32 = a0..a7): row groupID for a0,a1,a4,a5, groupID + 8 for a2,a3,a6,a7;
//     col threadID_in_group * 2 + (i & 1), + 8 for a4..a7;
//   B (16x8 col, 2 x .b32 = b0..b3): row threadID_in_group * 2 + (i & 1), + 8 for b2,b3; col groupID;
//   C, D (16x8, 4 x f32 c0..c3): row groupID for c0,c1, groupID + 8 for c2,c3; col threadID_in_group * 2 + (i & 1).
// Element i of a .b32 pair sits in its low half when i is even. Every bf16 or fp16 product
// is exact in double; the 16 products and c are summed in double and rounded once (the
// hardware's internal order and rounding of that sum are not specified to the bit).
template <class Elem>
static void mma_m16n8k16(float* d, const unsigned* a, const unsigned* b, const float* c, Elem elem) {
	float cin[4] = {c[0], c[1], c[2], c[3]};
	auto [w, lane, par] = mma_exchange(a, b);
	float A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		for (int i = 0; i < 8; i++) {
			int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
			int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
			A[row][col] = elem(mma_a[w][par][l][i / 2], i);
		}
		for (int i = 0; i < 4; i++) {
			int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
			B[row][g] = elem(mma_b[w][par][l][i / 2], i);
		}
	}
	int g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
		double s = cin[i];
		for (int k = 0; k < 16; k++) s += (double)A[row][k] * (double)B[k][col];
		d[i] = (float)s;
	}
}

// emu_mma_m16n8k16_bf16: the bf16 form.
extern "C" void emu_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b, const float* c) {
	mma_m16n8k16(d, a, b, c, [](unsigned reg, int i) { unsigned bits = (i & 1) ? (reg >> 16) : (reg & 0xffffu); float v; bits <<= 16; std::memcpy(&v, &bits, 4); return v; });
}

// emu_mma_m16n8k16_f16 is mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (the same
// fragments, fp16 elements: subnormals kept; every fp16 product is exact in double too).
extern "C" void emu_mma_m16n8k16_f16(float* d, const unsigned* a, const unsigned* b, const float* c) {
	mma_m16n8k16(d, a, b, c, [](unsigned reg, int i) {
		unsigned h = (i & 1) ? (reg >> 16) : (reg & 0xffffu);
		int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
		double v = exp == 0 ? std::ldexp((double)mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : std::ldexp((double)(1024 + mant), exp - 25);
		return (float)((h & 0x8000u) ? -v : v);
	});
}

// emu_mma_m16n8k8_tf32 is mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = A·B + C
// ("Matrix Fragments for mma.m16n8k8", .tf32; groupID = lane / 4, threadID_in_group =
// lane % 4):
//   A (16x8 row, a0..a3): row groupID for a0, a2, groupID + 8 for a1, a3; col
//     threadID_in_group, + 4 for a2, a3;
//   B (8x8 col, b0, b1): row threadID_in_group, + 4 for b1; col groupID;
//   C, D as for m16n8k16.
// A tf32 operand is its register's float with the low 13 bits cleared (the kernels clear
// them themselves); products are exact in double, summed there and rounded once.
extern "C" void emu_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b, const float* c) {
	float cin[4] = {c[0], c[1], c[2], c[3]};
	auto [w, lane, par] = mma_exchange(a, b);
	auto tf32 = [](unsigned reg) { unsigned bits = reg & 0xffffe000u; float v; std::memcpy(&v, &bits, 4); return v; };
	float A[16][8], B[8][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		for (int i = 0; i < 4; i++) A[g + (i & 1) * 8][t + (i >> 1) * 4] = tf32(mma_a[w][par][l][i]);
		for (int i = 0; i < 2; i++) B[t + i * 4][g] = tf32(mma_b[w][par][l][i]);
	}
	int g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
		double s = cin[i];
		for (int k = 0; k < 8; k++) s += (double)A[row][k] * (double)B[k][col];
		d[i] = (float)s;
	}
}

extern "C" void emu_check_failed(const char* what, int line) {
	std::fprintf(stderr, "emu: kernel check failed at line %d of the kernel source: %s\n", line, what);
	std::abort();
}

// emu_mma_m16n8k32_u8s8 is mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32, D = A·B + C
// ("Matrix Fragments for mma.m16n8k32", .u8/.s8; groupID = lane / 4, threadID_in_group =
// lane % 4), four 8-bit elements per register, the lowest in the low byte:
//   A (16x32 row, a0..a3): row groupID for a0, a2, groupID + 8 for a1, a3; col
//     threadID_in_group * 4 + byte, + 16 for a2, a3 (A unsigned);
//   B (32x8 col, b0, b1): row threadID_in_group * 4 + byte, + 16 for b1; col groupID (B signed);
//   C, D (s32) as the f32 accumulators of m16n8k16.
// Integer products and sums are exact; the hardware wraps on overflow, which 32 products
// of 8 bits cannot reach.
extern "C" void emu_mma_m16n8k32_u8s8(int* d, const unsigned* a, const unsigned* b, const int* c) {
	int cin[4] = {c[0], c[1], c[2], c[3]};
	auto [w, lane, par] = mma_exchange(a, b);
	int A[16][32], B[32][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		for (int r = 0; r < 4; r++) {
			for (int byte = 0; byte < 4; byte++) {
				A[g + (r & 1) * 8][t * 4 + byte + (r >> 1) * 16] = (int)((mma_a[w][par][l][r] >> (8 * byte)) & 0xffu);
			}
		}
		for (int r = 0; r < 2; r++) {
			for (int byte = 0; byte < 4; byte++) {
				B[t * 4 + byte + r * 16][g] = (int)(signed char)((mma_b[w][par][l][r] >> (8 * byte)) & 0xffu);
			}
		}
	}
	int g = lane / 4, t = lane % 4;
	for (int i = 0; i < 4; i++) {
		int row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
		long long s = cin[i];
		for (int k = 0; k < 32; k++) s += (long long)A[row][k] * B[k][col];
		d[i] = (int)s;
	}
}

extern "C" void emu_run_grid(void (*body)(const void*), const void* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
	if (!stacks) stacks = (char*)std::aligned_alloc(64, kStack * kMaxThreads);
	if (bx > kMaxThreads || bx % 32 != 0) { std::fprintf(stderr, "emu: block of %u threads\n", bx); std::abort(); }
	g_body = body; g_args = args;
	emu_gridDim = {gx, gy, gz};
	emu_blockDim = {bx, 1, 1};
	static const char* scr = getenv("EMU_SCRAMBLE");
	static unsigned long long srng = scr ? strtoull(scr, nullptr, 10) * 0x9e3779b97f4a7c15ull + 7 : 0;
	auto next = [] { srng = srng * 6364136223846793005ull + 1442695040888963407ull; return srng >> 33; };
	unsigned long long nblocks = (unsigned long long)gx * gy * gz;
	std::vector<unsigned long long> order(nblocks);
	for (unsigned long long i = 0; i < nblocks; i++) order[i] = i;
	if (scr) for (unsigned long long i = nblocks; i > 1; i--) std::swap(order[i - 1], order[next() % i]);
	std::vector<int> fiber_order(bx);
	for (unsigned long long bi = 0; bi < nblocks; bi++) {
		unsigned long long b = order[bi];
		unsigned x = b % gx, y = (b / gx) % gy, z = b / ((unsigned long long)gx * gy);
		emu_blockIdx = {x, y, z};
		nthreads = live = (int)bx;
		blk_arrived = 0;
		for (unsigned w = 0; w < bx / 32; w++) { warp_live[w] = 32; warp_arrived[w] = 0; }
		for (unsigned i = 0; i < bx; i++) init_fiber((int)i);
		for (unsigned i = 0; i < bx; i++) fiber_order[i] = (int)i;
		while (live > 0) {
			bool progress = false;
			if (scr) for (unsigned i = bx; i > 1; i--) std::swap(fiber_order[i - 1], fiber_order[next() % i]);
			for (int oi = 0; oi < nthreads; oi++) {
				int i = fiber_order[oi];
				Fiber& f = fibers[i];
				if (f.done) continue;
				if (f.wait == 2 && f.gen == blk_gen) continue;
				if (f.wait == 1 && f.gen == warp_gen[f.tid / 32]) continue;
				f.wait = 0;
				cur = i;
				emu_threadIdx = {f.tid, 0, 0};
				emu_swap(&sched_sp, f.sp);
				progress = true;
			}
			if (!progress) { std::fprintf(stderr, "emu: deadlock in block (%u,%u,%u)\n", x, y, z); std::abort(); }
		}
	}
}

// ---- driver API
struct Func { void (*launch)(const void*, unsigned, unsigned, unsigned, unsigned); size_t argsize; std::string name; };
struct Node { Func* f; unsigned g[3], b; std::vector<char> args; std::vector<size_t> deps; };
struct Graph { std::vector<Node> nodes; };
struct KParams { Func* fn; unsigned gx, gy, gz, bx, by, bz, smem; void** params; void** extra; uintptr_t kern, ctx; };

#include <map>
static std::map<uint64_t, uint64_t> allocs; // base -> size
static std::map<uint64_t, int> alloc_id;
static int next_id;
static long launches;
static void launch(Func* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, const void* args) {
	static bool trace = getenv("EMU_TRACE") != nullptr;
	static bool audit = getenv("EMU_AUDIT") != nullptr;
	launches++;
	if (trace) std::fprintf(stderr, "emu: %s grid %u,%u,%u block %u\n", f->name.c_str(), gx, gy, gz, bx);
	std::vector<std::pair<uint64_t, std::vector<char>>> before;
	if (audit) for (auto& a : allocs) if (a.second <= (4u << 20)) before.push_back({a.first, std::vector<char>((char*)a.first, (char*)a.first + a.second)});
	f->launch(args, gx, gy, gz, bx);
	if (audit) {
		std::fprintf(stderr, "L %ld %s\n", launches, f->name.c_str());
		for (auto& b : before) {
			const char* now = (const char*)b.first;
			uint64_t n = b.second.size();
			for (uint64_t i = 0; i < n;) {
				if (now[i] == b.second[i]) { i++; continue; }
				uint64_t j = i;
				while (j < n && (now[j] != b.second[j] || (j + 8 < n && std::memcmp(now + j, b.second.data() + j, 8) != 0))) j++;
				std::fprintf(stderr, "W %ld %s alloc%d(%llu) [%llu,%llu)\n", launches, f->name.c_str(), alloc_id[b.first], (unsigned long long)n, (unsigned long long)i, (unsigned long long)j);
				i = j;
			}
		}
	}
}

// The most dynamic group memory a kernel may opt in to: the H100's and H200's 232,448
// bytes, or EMU_GROUP_MEMORY's (a GPU with less, such as the 101,376 of sm_86 and sm_89
// cards), which cuFuncSetAttribute and cuLaunchKernel then hold launches to as the driver does.
static int emu_group_memory() { return getenv("EMU_GROUP_MEMORY") ? atoi(getenv("EMU_GROUP_MEMORY")) : 232448; }

extern "C" {
int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int* v) { *v = 12080; return 0; }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int) { *d = 0; return 0; }
int cuDeviceGetName(char* name, int n, int) { std::snprintf(name, n, "CPU emulation"); return 0; }
int cuDeviceGetAttribute(int* v, int attr, int) {
	switch (attr) { case 75: *v = 9; break; case 76: *v = 0; break; case 16: *v = getenv("EMU_SMS") ? atoi(getenv("EMU_SMS")) : 132; break; case 97: *v = emu_group_memory(); break; default: *v = 0; }
	return 0;
}
int cuDeviceTotalMem_v2(uint64_t* b, int) { *b = 16ull << 30; return 0; }
int cuDevicePrimaryCtxRetain(uintptr_t* c, int) { *c = 1; return 0; }
int cuCtxSetCurrent(uintptr_t) { return 0; }
int cuCtxSynchronize() { return 0; }
static uint64_t allocated;
int cuMemAlloc_v2(uint64_t* p, uint64_t n) { void* m = std::aligned_alloc(256, (n + 255) / 256 * 256); if (!m) return 2; std::memset(m, 0xcd, (n + 255) / 256 * 256); *p = (uint64_t)m; allocs[*p] = n; alloc_id[*p] = next_id++; allocated += n; if (getenv("EMU_AUDIT")) std::fprintf(stderr, "A alloc%d %llu\n", alloc_id[*p], (unsigned long long)n); return 0; }
int cuMemFree_v2(uint64_t p) { allocated -= allocs[p]; allocs.erase(p); std::free((void*)p); return 0; }
// Page-locked host memory is plain host memory here: every copy is synchronous.
int cuMemAllocHost_v2(void** p, uint64_t n) { *p = std::aligned_alloc(256, (n + 255) / 256 * 256); return *p ? 0 : 2; }
int cuMemFreeHost(void* p) { std::free(p); return 0; }
int cuMemGetInfo_v2(uint64_t* f, uint64_t* t) { *t = 16ull << 30; *f = *t - allocated; return 0; }
int cuMemcpyDtoDAsync_v2(uint64_t d, uint64_t s, uint64_t n, uintptr_t) { std::memmove((void*)d, (void*)s, n); return 0; }
int cuMemcpyHtoD_v2(uint64_t d, const void* s, uint64_t n) { std::memcpy((void*)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void* d, uint64_t s, uint64_t n) { std::memcpy(d, (void*)s, n); return 0; }
int cuMemcpyHtoDAsync_v2(uint64_t d, const void* s, uint64_t n, uintptr_t) { std::memcpy((void*)d, s, n); return 0; }
int cuMemcpyDtoHAsync_v2(void* d, uint64_t s, uint64_t n, uintptr_t) { std::memcpy(d, (void*)s, n); return 0; }
int cuMemsetD8_v2(uint64_t d, unsigned char v, uint64_t n) { std::memset((void*)d, v, n); return 0; }
int cuMemsetD8Async(uint64_t d, unsigned char v, uint64_t n, uintptr_t) { std::memset((void*)d, v, n); return 0; }
int cuStreamCreate(uintptr_t* s, unsigned) { *s = 1; return 0; }
int cuStreamSynchronize(uintptr_t) { return 0; }
int cuModuleLoadData(uintptr_t* m, const char* path) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { std::fprintf(stderr, "emu: %s\n", dlerror()); return 200; }
	// The library stays mapped once loaded: its temporary folder (libnvrtc.cpp) can go.
	std::string so = path, dir = so.substr(0, so.rfind('/'));
	if (dir.rfind("/tmp/pistil-emu-", 0) == 0) { unlink(so.c_str()); unlink((dir + "/kernels.cpp").c_str()); rmdir(dir.c_str()); }
	*m = (uintptr_t)h; return 0;
}
int cuModuleGetFunction(uintptr_t* f, uintptr_t m, const char* name) {
	std::string l = std::string("emu_launch_") + name, s = std::string("emu_argsize_") + name;
	void* lf = dlsym((void*)m, l.c_str());
	size_t* sz = (size_t*)dlsym((void*)m, s.c_str());
	if (!lf || !sz) return 500;
	*f = (uintptr_t) new Func{(void (*)(const void*, unsigned, unsigned, unsigned, unsigned))lf, *sz, name};
	return 0;
}
int cuFuncSetAttribute(uintptr_t, int attr, int v) { return attr == 8 && v > emu_group_memory() ? 1 : 0; }
int cuLaunchKernel(Func* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, uintptr_t, void** params, void**) {
	if (by != 1 || bz != 1 || (int)shared > emu_group_memory()) return 1;
	launch(f, gx, gy, gz, bx, params[0]);
	return 0;
}
int cuGraphCreate(uintptr_t* g, unsigned) { *g = (uintptr_t) new Graph; return 0; }
int cuGraphAddKernelNode_v2(uintptr_t* node, Graph* g, uintptr_t* deps, size_t ndeps, KParams* p) {
	Node n{p->fn, {p->gx, p->gy, p->gz}, p->bx, std::vector<char>((char*)p->params[0], (char*)p->params[0] + p->fn->argsize), {}};
	for (size_t i = 0; i < ndeps; i++) n.deps.push_back(deps[i] - 1);
	g->nodes.push_back(n);
	*node = g->nodes.size();
	return 0;
}
// Edges added after their nodes, with CUgraphEdgeData (from_port, to_port, type, five
// reserved bytes): checked as the driver documents them, then kept as ordinary edges
// (the emulator never overlaps nodes, so a programmatic edge orders like a full one).
struct EdgeData { unsigned char from_port, to_port, type, reserved[5]; };
int cuGraphAddDependencies_v2(Graph* g, uintptr_t* from, uintptr_t* to, EdgeData* data, size_t n) {
	for (size_t i = 0; i < n; i++) {
		if (from[i] == 0 || to[i] == 0 || from[i] > g->nodes.size() || to[i] > g->nodes.size() || from[i] == to[i]) return 1;
		if (data) {
			const EdgeData& e = data[i];
			if (e.to_port != 0 || e.type > 1 || e.from_port > 2) return 1;
			for (unsigned char r : e.reserved) if (r != 0) return 1;
		}
		g->nodes[to[i] - 1].deps.push_back(from[i] - 1);
	}
	return 0;
}
int cuGraphInstantiateWithFlags(uintptr_t* e, Graph* g, uint64_t) { *e = (uintptr_t) new Graph(*g); return 0; }
// EMU_SHUFFLE=seed runs the nodes in a random order that honours only the graph's edges
// (what concurrent execution may do); otherwise in the order they were added.
int cuGraphLaunch(Graph* e, uintptr_t) {
	static const char* sh = getenv("EMU_SHUFFLE");
	static unsigned long long rng = sh ? strtoull(sh, nullptr, 10) * 2654435761ull + 1 : 0;
	size_t n = e->nodes.size();
	if (!sh) { for (auto& nd : e->nodes) launch(nd.f, nd.g[0], nd.g[1], nd.g[2], nd.b, nd.args.data()); return 0; }
	std::vector<int> indeg(n, 0);
	std::vector<std::vector<size_t>> succ(n);
	for (size_t i = 0; i < n; i++) for (size_t d : e->nodes[i].deps) { indeg[i]++; succ[d].push_back(i); }
	std::vector<size_t> ready;
	for (size_t i = 0; i < n; i++) if (!indeg[i]) ready.push_back(i);
	size_t done = 0;
	while (!ready.empty()) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		size_t k = (rng >> 33) % ready.size();
		size_t i = ready[k]; ready.erase(ready.begin() + k);
		auto& nd = e->nodes[i];
		launch(nd.f, nd.g[0], nd.g[1], nd.g[2], nd.b, nd.args.data());
		done++;
		for (size_t s2 : succ[i]) if (--indeg[s2] == 0) ready.push_back(s2);
	}
	if (done != n) { std::fprintf(stderr, "emu: graph has a cycle\n"); return 1; }
	return 0;
}
int cuGraphExecDestroy(Graph* e) { delete e; return 0; }
int cuGraphDestroy(Graph* g) { delete g; return 0; }
int cuGraphGetNodes(Graph* g, uintptr_t* nodes, size_t* n) {
	if (nodes) for (size_t i = 0; i < *n && i < g->nodes.size(); i++) nodes[i] = i + 1;
	*n = g->nodes.size();
	return 0;
}
int cuEventCreate(uintptr_t* e, unsigned) { *e = (uintptr_t) new double(0); return 0; }
int cuEventRecord(double* e, uintptr_t) { *e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count(); return 0; }
int cuEventSynchronize(uintptr_t) { return 0; }
int cuEventElapsedTime_v2(float* ms, double* a, double* b) { *ms = (float)(*b - *a); return 0; }
int cuGetErrorString(int r, const char** s) { static char buf[64]; std::snprintf(buf, 64, "emulated error %d", r); *s = buf; return 0; }
}
