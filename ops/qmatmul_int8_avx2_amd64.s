// AVX2 kernel of the int8-activation q4 matmul, for machines without AVX-512 VNNI: the
// same activation layout and the same exact integer sums as q4Int8Dot8VNNI
// (qmatmul_int8_amd64.s), with VPMADDUBSW (u8 codes x s8 activations, pairs summed to
// int16) and VPMADDWD against ones (int16 pairs to int32) in place of VPDPBUSD. No sum
// can saturate: a code is at most 15 and an activation at most 127 in magnitude, so the
// eight vectors' products of one 16-bit lane sum to at most 8·2·15·127 = 30,480 < 2^15,
// added in int16 before the one widening VPMADDWD.
//
// A 256-bit register holds half of a block's qword lanes: the low half of each
// 64-byte activation vector holds groups 0 4 1 5 (lanes j = 0..3), the high half groups
// 2 6 3 7. Each half transposes its four groups' code qwords (VPUNPCK[LH]QDQ, then
// VPERM2I128) so that qword lane j of vector T_k holds qword k of its group, splits the
// nibbles into Y0-Y7 and meets the eight activation rows with them. Sixteen YMM
// registers cannot also hold eight row accumulators, so those live on the stack (the
// frame's 256 bytes, row p at 32p(SP)), read and written once per row and half block.
// Y10 holds int16 ones, Y11/Y13 the half's weight scales and biases spread over its
// lanes, Y14 the nibble mask; X15 and R14 are left alone (ABIInternal's zero and g).

#include "textflag.h"
#include "qmatmul_int8_amd64.h"

// ROW meets Y0-Y7 with one activation row's half block (a0..a7: its eight code vectors'
// halves, sx and xs its activation scales and halved group sums) and adds to the row's
// accumulator acc on the stack.
#define ROW(a0, a1, a2, a3, a4, a5, a6, a7, sx, xs, acc) \
	VPMADDUBSW  a0, Y0, Y8; \
	VPMADDUBSW  a1, Y1, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a2, Y2, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a3, Y3, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a4, Y4, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a5, Y5, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a6, Y6, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDUBSW  a7, Y7, Y9; \
	VPADDW      Y9, Y8, Y8; \
	VPMADDWD    Y10, Y8, Y8; \
	INT8_HALF_ACCUMULATE(sx, xs, acc)

// DOT1 meets Y0-Y7 with the one activation row's half block (a0..a7) and leaves the
// half's int32 sums in dst (dword lanes 2j and 2j+1 both of the half's group j).
#define DOT1(a0, a1, a2, a3, a4, a5, a6, a7, dst) \
	VPMADDUBSW a0, Y0, Y8; \
	VPMADDUBSW a1, Y1, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a2, Y2, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a3, Y3, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a4, Y4, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a5, Y5, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a6, Y6, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDUBSW a7, Y7, Y9; \
	VPADDW     Y9, Y8, Y8; \
	VPMADDWD   Y10, Y8, dst

#define INT8_AVX2_TILE ·q4Int8Dot8AVX2Asm
#define INT8_AVX2_DOT1 ·q4Int8Dot1AVX2Asm
#include "qmatmul_int8_avx2_kernels.h"

// QRUN2 quantizes run k of 16 elements (ya: its first 8, yb: its last 8, times inv in
// Y12), adds their int32 values to Y14, and stores their even and odd bytes at vectors
// 2k and 2k+1 of the block, lane j (DI points at byte 8j of vector 0). VPACKSSDW packs
// within 128-bit halves, so VPERMQ puts the sixteen int16 back in element order before
// the last pack; nothing saturates (|v| <= 127).
#define QRUN2(ya, xa, yb, off) \
	VMULPS       Y12, ya, ya; \
	VMULPS       Y12, yb, yb; \
	VCVTPS2DQ    ya, ya; \
	VCVTPS2DQ    yb, yb; \
	VPADDD       ya, Y14, Y14; \
	VPADDD       yb, Y14, Y14; \
	VPACKSSDW    yb, ya, ya; \
	VPERMQ       $0xd8, ya, ya; \
	VEXTRACTI128 $1, ya, X10; \
	VPACKSSWB    X10, xa, xa; \
	VPSHUFB      X11, xa, xa; \
	VMOVQ        xa, off(DI); \
	VPEXTRQ      $1, xa, off+64(DI)

// func quantizeGroupAVX2(x *float32, block *byte, lane int)
//
// quantizeGroupAVX512's work (quantizeInt8Row for one group of 64) on 256-bit registers,
// for machines without AVX-512: the same float steps in the same order (max|x|, 127/amax,
// x·inv rounded to even by VCVTPS2DQ, amax/127, float32(qsum)·sx/2), so the same bytes
// and floats as the Go loop.
TEXT ·quantizeGroupAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ block+8(FP), DX
	MOVQ lane+16(FP), BX

	VMOVUPS      (SI), Y0
	VMOVUPS      32(SI), Y1
	VMOVUPS      64(SI), Y2
	VMOVUPS      96(SI), Y3
	VMOVUPS      128(SI), Y4
	VMOVUPS      160(SI), Y5
	VMOVUPS      192(SI), Y6
	VMOVUPS      224(SI), Y7
	VBROADCASTSS ·int8QuantConst+0(SB), Y8
	VANDPS       Y8, Y0, Y9
	VANDPS       Y8, Y1, Y10
	VMAXPS       Y10, Y9, Y9
	VANDPS       Y8, Y2, Y10
	VANDPS       Y8, Y3, Y11
	VMAXPS       Y11, Y10, Y10
	VMAXPS       Y10, Y9, Y9
	VANDPS       Y8, Y4, Y10
	VANDPS       Y8, Y5, Y11
	VMAXPS       Y11, Y10, Y10
	VMAXPS       Y10, Y9, Y9
	VANDPS       Y8, Y6, Y10
	VANDPS       Y8, Y7, Y11
	VMAXPS       Y11, Y10, Y10
	VMAXPS       Y10, Y9, Y9
	VEXTRACTF128 $1, Y9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0x4e, X9, X10
	VMAXPS       X10, X9, X9
	VPERMILPS    $0xb1, X9, X10
	VMAXPS       X10, X9, X9 // amax in every lane of X9
	VXORPS       X10, X10, X10
	VUCOMISS     X10, X9
	JEQ          q8avx2zero

	VMOVSS       ·int8QuantConst+4(SB), X11
	VDIVSS       X9, X11, X12 // inv = 127 / amax
	VBROADCASTSS X12, Y12
	VDIVSS       X11, X9, X13 // sx = amax / 127
	VPXOR        Y14, Y14, Y14
	VMOVDQU      ·int8EvenOdd16(SB), X11
	LEAQ         (DX)(BX*8), DI
	QRUN2(Y0, X0, Y1, 0)
	QRUN2(Y2, X2, Y3, 128)
	QRUN2(Y4, X4, Y5, 256)
	QRUN2(Y6, X6, Y7, 384)

	// qsum: the lane sum of Y14; the tables take sx and float32(qsum)·sx/2 twice each.
	VEXTRACTI128 $1, Y14, X10
	VPADDD       X10, X14, X14
	VPSHUFD      $0x4e, X14, X10
	VPADDD       X10, X14, X14
	VPSHUFD      $0xb1, X14, X10
	VPADDD       X10, X14, X14
	VCVTDQ2PS    X14, X14
	VMULSS       X13, X14, X14
	VMULSS       ·int8QuantConst+8(SB), X14, X14
	SHLQ         $3, BX // lane j: floats 2j and 2j+1 of each table, 8 bytes
	VMOVSS       X13, 512(DX)(BX*1)
	VMOVSS       X13, 516(DX)(BX*1)
	VMOVSS       X14, 576(DX)(BX*1)
	VMOVSS       X14, 580(DX)(BX*1)

q8avx2zero:
	VZEROUPPER
	RET
