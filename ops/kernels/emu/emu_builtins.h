// The MSL built-ins of the CPU emulator, included by msl_model.h inside namespace metal
// when PZ_EMU is defined. Maths are the C library's float functions, which are accurate
// (what MSL's precise:: forms promise); SIMD operations and barriers go to the scheduler.
namespace precise {
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float pow(float x, float y) { return std::pow(x, y); }
inline float cos(float x) { return std::cos(x); }
inline float sin(float x) { return std::sin(x); }
}
inline float fmax(float a, float b) { return std::fmax(a, b); }
inline bool isinf(float x) { return std::isinf(x); }

inline uint64_t pz_in(float v) { return pz_emu::bits(v); }
inline uint64_t pz_in(int v) { return (uint32_t)v; }
inline uint64_t pz_in(uint v) { return v; }
inline float pz_out(float, uint64_t b) { return pz_emu::as_float(b); }
inline int pz_out(int, uint64_t b) { return (int)(uint32_t)b; }
inline uint pz_out(uint, uint64_t b) { return (uint)b; }
template <typename T> inline constexpr bool pz_is_int = !__is_same(T, float);

template <typename T> T pz_simd(int op, T v, unsigned arg, int line) {
	return pz_out(v, pz_emu::simd(op, pz_is_int<T>, pz_in(v), arg, line));
}
#define simd_sum(v) metal::pz_simd(pz_emu::OpSum, (v), 0, __LINE__)
#define simd_max(v) metal::pz_simd(pz_emu::OpMax, (v), 0, __LINE__)
#define simd_shuffle_xor(v, m) metal::pz_simd(pz_emu::OpXor, (v), (unsigned)(m), __LINE__)
#define simd_shuffle(v, l) metal::pz_simd(pz_emu::OpShuffle, (v), (unsigned)(l), __LINE__)
#define simdgroup_barrier(f) ((void)metal::pz_simd(pz_emu::OpBarrier, 0, 0, __LINE__))
#define threadgroup_barrier(f) pz_emu::group_barrier(__LINE__)

// One emulated thread runs at a time, so a plain add is atomic.
inline int atomic_fetch_add_explicit(atomic_int* p, int v, memory_order) {
	int old = p->value;
	p->value += v;
	return old;
}
