// Shared by the int8 tile kernels of qmatmul_int8_amd64.s (q4Int8Dot8VNNI) and
// qmatmul_int8_avx2_amd64.s (q4Int8Dot8AVX2Asm), whose arguments have the same layout.

// INT8_WEIGHT_ROW_START loads a tile kernel's pointers for its current weight row: SI its
// codes, R8 and R9 its scales and biases, CX the blocks, DI the first activation row and
// R11, R12, R13 rows 4, 3 and 7 of the eight (BX is the activation row stride).
#define INT8_WEIGHT_ROW_START \
	MOVQ codes+0(FP), SI; \
	MOVQ scales+16(FP), R8; \
	MOVQ biases+24(FP), R9; \
	MOVQ blocks+40(FP), CX; \
	MOVQ acts+56(FP), DI; \
	LEAQ (DI)(BX*4), R11; \
	LEAQ (DI)(BX*2), R12; \
	ADDQ BX, R12; \
	LEAQ (R11)(BX*2), R13; \
	ADDQ BX, R13

// INT8_NEXT_WEIGHT_ROW moves a tile kernel on to its next weight row: the output pointer DX
// past this row's eight sums, and the codes, scales and biases pointers (kept in their
// argument slots) by their strides. Clobbers AX and R10.
#define INT8_NEXT_WEIGHT_ROW \
	ADDQ $32, DX; \
	MOVQ codes+0(FP), AX; \
	ADDQ codeStride+8(FP), AX; \
	MOVQ AX, codes+0(FP); \
	MOVQ groupStride+32(FP), R10; \
	MOVQ scales+16(FP), AX; \
	ADDQ R10, AX; \
	MOVQ AX, scales+16(FP); \
	MOVQ biases+24(FP), AX; \
	ADDQ R10, AX; \
	MOVQ AX, biases+24(FP)

// INT8_HALF_ACCUMULATE is the end of the 256-bit kernels' ROW (qmatmul_int8_avx2_amd64.s,
// qmatmul_int8_avxvnni_amd64.s): a row's half-block int32 sums in Y8 to float32, times its
// activation scales sx, times the weight scales in Y11, plus its halved activation sums xs
// times the weight biases in Y13, added to the row's accumulator acc on the stack (Y12 is
// clobbered).
#define INT8_HALF_ACCUMULATE(sx, xs, acc) \
	VCVTDQ2PS   Y8, Y8; \
	VMULPS      sx, Y8, Y8; \
	VMOVUPS     acc, Y12; \
	VFMADD231PS Y11, Y8, Y12; \
	VFMADD231PS xs, Y13, Y12; \
	VMOVUPS     Y12, acc
