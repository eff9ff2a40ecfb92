// AVX2/FMA kernel of one gated delta step over one value head's state (deltanet.go).

#include "textflag.h"

// func gdnStepAVX2(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)
// Per tile of 32 state columns (the tile, Dk rows of 128 bytes, stays in L1 between
// the two passes, so S is read from memory once and written once):
//   pass 1: S_i ← decay·S_i, mem += k_i·S_i, then δ = beta·(v − mem);
//   pass 2: S_i += k_i·δ, o = Σ_i q_i·S_i.
TEXT ·gdnStepAVX2(SB), NOSPLIT, $0-64
	MOVQ S+0(FP), DX
	MOVQ Dk+8(FP), R8
	MOVQ Dv+16(FP), R11
	SHLQ $2, R11                 // bytes of a state row
	VBROADCASTSS decay+24(FP), Y12
	VBROADCASTSS beta+28(FP), Y13
	MOVQ q+32(FP), R9
	MOVQ k+40(FP), R10
	MOVQ v+48(FP), R12
	MOVQ o+56(FP), R13
	XORQ CX, CX                  // byte offset of the column tile

tile:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ   (DX)(CX*1), SI
	MOVQ   R10, DI
	MOVQ   R8, BX

retrieve:
	VMULPS       0(SI), Y12, Y4
	VMULPS       32(SI), Y12, Y5
	VMULPS       64(SI), Y12, Y6
	VMULPS       96(SI), Y12, Y7
	VMOVUPS      Y4, 0(SI)
	VMOVUPS      Y5, 32(SI)
	VMOVUPS      Y6, 64(SI)
	VMOVUPS      Y7, 96(SI)
	VBROADCASTSS (DI), Y8
	VFMADD231PS  Y4, Y8, Y0
	VFMADD231PS  Y5, Y8, Y1
	VFMADD231PS  Y6, Y8, Y2
	VFMADD231PS  Y7, Y8, Y3
	ADDQ         R11, SI
	ADDQ         $4, DI
	DECQ         BX
	JNZ          retrieve

	// δ = beta·(v − mem)
	VMOVUPS 0(R12)(CX*1), Y4
	VMOVUPS 32(R12)(CX*1), Y5
	VMOVUPS 64(R12)(CX*1), Y6
	VMOVUPS 96(R12)(CX*1), Y7
	VSUBPS  Y0, Y4, Y0
	VSUBPS  Y1, Y5, Y1
	VSUBPS  Y2, Y6, Y2
	VSUBPS  Y3, Y7, Y3
	VMULPS  Y13, Y0, Y0
	VMULPS  Y13, Y1, Y1
	VMULPS  Y13, Y2, Y2
	VMULPS  Y13, Y3, Y3

	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	LEAQ   (DX)(CX*1), SI
	MOVQ   R10, DI
	MOVQ   R9, AX
	MOVQ   R8, BX

update:
	VMOVUPS      0(SI), Y4
	VMOVUPS      32(SI), Y5
	VMOVUPS      64(SI), Y6
	VMOVUPS      96(SI), Y7
	VBROADCASTSS (DI), Y14
	VFMADD231PS  Y0, Y14, Y4
	VFMADD231PS  Y1, Y14, Y5
	VFMADD231PS  Y2, Y14, Y6
	VFMADD231PS  Y3, Y14, Y7
	VMOVUPS      Y4, 0(SI)
	VMOVUPS      Y5, 32(SI)
	VMOVUPS      Y6, 64(SI)
	VMOVUPS      Y7, 96(SI)
	VBROADCASTSS (AX), Y14
	VFMADD231PS  Y4, Y14, Y8
	VFMADD231PS  Y5, Y14, Y9
	VFMADD231PS  Y6, Y14, Y10
	VFMADD231PS  Y7, Y14, Y11
	ADDQ         R11, SI
	ADDQ         $4, DI
	ADDQ         $4, AX
	DECQ         BX
	JNZ          update

	VMOVUPS Y8, 0(R13)(CX*1)
	VMOVUPS Y9, 32(R13)(CX*1)
	VMOVUPS Y10, 64(R13)(CX*1)
	VMOVUPS Y11, 96(R13)(CX*1)
	ADDQ    $128, CX
	CMPQ    CX, R11
	JLT     tile
	VZEROUPPER
	RET
