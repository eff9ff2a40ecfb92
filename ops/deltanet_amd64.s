// Kernels of one gated delta step over one value head's state (deltanet.go): AVX2/FMA on
// tiles of 32 state columns, AVX-512 on tiles of 64, one body (deltanet_step_amd64.h).
//
// func gdnStepAVX2(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)
// func gdnStepAVX512(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)
//
// Per tile of state columns (the tile, Dk rows of 128 or 256 bytes, stays in L1 between
// the two passes, so S is read from memory once and written once):
//   pass 1: mem += k_i·(decay·S_i), then δ = beta·(v − mem);
//   pass 2: S_i ← decay·S_i + k_i·δ, o = Σ_i q_i·S_i.
// decay·S_i is rounded, then added to, in both passes, as when pass 1 stored it for pass 2
// (the same bits), but only pass 2 stores. With a prefill run's tile in L1 each pass is
// bound by its four FMA chains, a row every four cycles; the 512-bit kernel does twice the
// columns a chain, which paid only once pass 1's stores were gone (eight 512-bit stores a
// row had bound it instead). Each column's operations are the same in both kernels, in the
// same order: the same bits (TestGatedDeltaStepKernelsAgree).

#include "textflag.h"

#define GDN_STEP ·gdnStepAVX2
#define V0 Y0
#define V1 Y1
#define V2 Y2
#define V3 Y3
#define V4 Y4
#define V5 Y5
#define V6 Y6
#define V7 Y7
#define V8 Y8
#define V9 Y9
#define V10 Y10
#define V11 Y11
#define V12 Y12
#define V13 Y13
#define V14 Y14
#define VZERO(r) VXORPS r, r, r
#define GDN_B1 32
#define GDN_B2 64
#define GDN_B3 96
#define GDN_TILE 128
#include "deltanet_step_amd64.h"

#undef GDN_STEP
#undef V0
#undef V1
#undef V2
#undef V3
#undef V4
#undef V5
#undef V6
#undef V7
#undef V8
#undef V9
#undef V10
#undef V11
#undef V12
#undef V13
#undef V14
#undef VZERO
#undef GDN_B1
#undef GDN_B2
#undef GDN_B3
#undef GDN_TILE

#define GDN_STEP ·gdnStepAVX512
#define V0 Z0
#define V1 Z1
#define V2 Z2
#define V3 Z3
#define V4 Z4
#define V5 Z5
#define V6 Z6
#define V7 Z7
#define V8 Z8
#define V9 Z9
#define V10 Z10
#define V11 Z11
#define V12 Z12
#define V13 Z13
#define V14 Z14
#define VZERO(r) VPXORD r, r, r
#define GDN_B1 64
#define GDN_B2 128
#define GDN_B3 192
#define GDN_TILE 256
#include "deltanet_step_amd64.h"
