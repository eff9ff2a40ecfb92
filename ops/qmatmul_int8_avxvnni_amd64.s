// AVX-VNNI kernels of the int8-activation q4 matmul, for machines with the VEX-encoded
// VPDPBUSD but without AVX-512 (Intel's Alder Lake and later client cores, Sierra Forest):
// the AVX2 kernels (qmatmul_int8_avx2_kernels.h) with each half block's eight
// VPMADDUBSW, seven VPADDW and one VPMADDWD against ones replaced by eight VPDPBUSD into
// int32 accumulators. The sums are exact either way (the AVX2 kernel's int16 partial
// sums cannot saturate, see there), so these kernels give the AVX2 kernels' bits.
//
// Go's assembler encodes VPDPBUSD only with EVEX (AVX512_VNNI, which these machines lack),
// so the two forms used, VPDPBUSD Y8, Yk, Y9 and VPDPBUSD Y10, Yk, Y9 (the accumulator
// += the four-byte dot products of Yk's unsigned bytes and Y9's signed ones, k = 0..7),
// are written as their VEX bytes: C4, then 42 (R and B set: Y8/Y10 and Y9 are extended
// registers; map 0F38), then 0x7D - 8k (W0, vvvv = ~k, L = 256, pp = 66), opcode 50, and
// ModRM C1 (reg Y8, rm Y9) or D1 (reg Y10, rm Y9), as GNU as encodes them with {vex}. The
// activation operand is loaded into Y9 first (a memory operand would need an encoding per
// addressing form). Even k accumulate in Y8, odd k in Y10 (Y10, the AVX2 kernels' int16
// ones, is free here): two dependency chains of four instead of one of eight.

#include "textflag.h"
#include "qmatmul_int8_amd64.h"

#define VPDPBUSD_Y8_Y0_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x7d; BYTE $0x50; BYTE $0xc1
#define VPDPBUSD_Y10_Y1_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x75; BYTE $0x50; BYTE $0xd1
#define VPDPBUSD_Y8_Y2_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x6d; BYTE $0x50; BYTE $0xc1
#define VPDPBUSD_Y10_Y3_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x65; BYTE $0x50; BYTE $0xd1
#define VPDPBUSD_Y8_Y4_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x5d; BYTE $0x50; BYTE $0xc1
#define VPDPBUSD_Y10_Y5_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x55; BYTE $0x50; BYTE $0xd1
#define VPDPBUSD_Y8_Y6_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x4d; BYTE $0x50; BYTE $0xc1
#define VPDPBUSD_Y10_Y7_Y9 BYTE $0xc4; BYTE $0x42; BYTE $0x45; BYTE $0x50; BYTE $0xd1

// DOTHALF leaves in Y8 the int32 sums of Y0-Y7 (a half block's code vectors) times the
// activation row's vectors a0..a7 (dword lane 2j and 2j+1: the half's group j); Y9 and
// Y10 are clobbered.
#define DOTHALF(a0, a1, a2, a3, a4, a5, a6, a7) \
	VPXOR   Y8, Y8, Y8; \
	VPXOR   Y10, Y10, Y10; \
	VMOVDQU a0, Y9; \
	VPDPBUSD_Y8_Y0_Y9; \
	VMOVDQU a1, Y9; \
	VPDPBUSD_Y10_Y1_Y9; \
	VMOVDQU a2, Y9; \
	VPDPBUSD_Y8_Y2_Y9; \
	VMOVDQU a3, Y9; \
	VPDPBUSD_Y10_Y3_Y9; \
	VMOVDQU a4, Y9; \
	VPDPBUSD_Y8_Y4_Y9; \
	VMOVDQU a5, Y9; \
	VPDPBUSD_Y10_Y5_Y9; \
	VMOVDQU a6, Y9; \
	VPDPBUSD_Y8_Y6_Y9; \
	VMOVDQU a7, Y9; \
	VPDPBUSD_Y10_Y7_Y9; \
	VPADDD  Y10, Y8, Y8

// ROW is the AVX2 file's ROW with DOTHALF for the integer part: the row's half-block sums
// scaled and added to its accumulator acc on the stack.
#define ROW(a0, a1, a2, a3, a4, a5, a6, a7, sx, xs, acc) \
	DOTHALF(a0, a1, a2, a3, a4, a5, a6, a7); \
	INT8_HALF_ACCUMULATE(sx, xs, acc)

// DOT1 is the AVX2 file's DOT1: the half's int32 sums in dst.
#define DOT1(a0, a1, a2, a3, a4, a5, a6, a7, dst) \
	DOTHALF(a0, a1, a2, a3, a4, a5, a6, a7); \
	VMOVDQA Y8, dst

#define INT8_AVX2_TILE ·q4Int8Dot8AVXVNNIAsm
#define INT8_AVX2_DOT1 ·q4Int8Dot1AVXVNNIAsm
#include "qmatmul_int8_avx2_kernels.h"
