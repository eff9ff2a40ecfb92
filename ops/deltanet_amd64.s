// AVX2/FMA kernel of one gated delta step over one value head's state (deltanet.go).

#include "textflag.h"

// func gdnStepAVX2(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)
// Per tile of 32 state columns (the tile, Dk rows of 128 bytes, stays in L1 between
// the two passes, so S is read from memory once and written once):
//   pass 1: mem += k_i·(decay·S_i), then δ = beta·(v − mem);
//   pass 2: S_i ← decay·S_i + k_i·δ, o = Σ_i q_i·S_i.
// decay·S_i is rounded, then added to, in both passes, as when pass 1 stored it for pass 2
// (the same bits), but only pass 2 stores: the stores, eight a row, bound a prefill run's
// recurrence (the tile is in L1), and pass 1's were half of them.
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
	VMULPS       0(SI), Y12, Y4
	VMULPS       32(SI), Y12, Y5
	VMULPS       64(SI), Y12, Y6
	VMULPS       96(SI), Y12, Y7
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

// func gdnStepAVX512(S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32)
// gdnStepAVX2 with tiles of 64 state columns in four 512-bit registers (the tile, Dk rows
// of 256 bytes, 32 KiB at Dk = 128, still stays in L1 between the passes): twice the
// columns per instruction with the same four FMA chains a pass, each column's operations
// in the same order, so the same bits.
TEXT ·gdnStepAVX512(SB), NOSPLIT, $0-64
	MOVQ         S+0(FP), DX
	MOVQ         Dk+8(FP), R8
	MOVQ         Dv+16(FP), R11
	SHLQ         $2, R11                 // bytes of a state row
	VBROADCASTSS decay+24(FP), Z12
	VBROADCASTSS beta+28(FP), Z13
	MOVQ         q+32(FP), R9
	MOVQ         k+40(FP), R10
	MOVQ         v+48(FP), R12
	MOVQ         o+56(FP), R13
	XORQ         CX, CX                  // byte offset of the column tile

tile512:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	LEAQ   (DX)(CX*1), SI
	MOVQ   R10, DI
	MOVQ   R8, BX

retrieve512:
	VMULPS       0(SI), Z12, Z4
	VMULPS       64(SI), Z12, Z5
	VMULPS       128(SI), Z12, Z6
	VMULPS       192(SI), Z12, Z7
	VBROADCASTSS (DI), Z8
	VFMADD231PS  Z4, Z8, Z0
	VFMADD231PS  Z5, Z8, Z1
	VFMADD231PS  Z6, Z8, Z2
	VFMADD231PS  Z7, Z8, Z3
	ADDQ         R11, SI
	ADDQ         $4, DI
	DECQ         BX
	JNZ          retrieve512

	// δ = beta·(v − mem)
	VMOVUPS 0(R12)(CX*1), Z4
	VMOVUPS 64(R12)(CX*1), Z5
	VMOVUPS 128(R12)(CX*1), Z6
	VMOVUPS 192(R12)(CX*1), Z7
	VSUBPS  Z0, Z4, Z0
	VSUBPS  Z1, Z5, Z1
	VSUBPS  Z2, Z6, Z2
	VSUBPS  Z3, Z7, Z3
	VMULPS  Z13, Z0, Z0
	VMULPS  Z13, Z1, Z1
	VMULPS  Z13, Z2, Z2
	VMULPS  Z13, Z3, Z3

	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	LEAQ   (DX)(CX*1), SI
	MOVQ   R10, DI
	MOVQ   R9, AX
	MOVQ   R8, BX

update512:
	VMULPS       0(SI), Z12, Z4
	VMULPS       64(SI), Z12, Z5
	VMULPS       128(SI), Z12, Z6
	VMULPS       192(SI), Z12, Z7
	VBROADCASTSS (DI), Z14
	VFMADD231PS  Z0, Z14, Z4
	VFMADD231PS  Z1, Z14, Z5
	VFMADD231PS  Z2, Z14, Z6
	VFMADD231PS  Z3, Z14, Z7
	VMOVUPS      Z4, 0(SI)
	VMOVUPS      Z5, 64(SI)
	VMOVUPS      Z6, 128(SI)
	VMOVUPS      Z7, 192(SI)
	VBROADCASTSS (AX), Z14
	VFMADD231PS  Z4, Z14, Z8
	VFMADD231PS  Z5, Z14, Z9
	VFMADD231PS  Z6, Z14, Z10
	VFMADD231PS  Z7, Z14, Z11
	ADDQ         R11, SI
	ADDQ         $4, DI
	ADDQ         $4, AX
	DECQ         BX
	JNZ          update512

	VMOVUPS Z8, 0(R13)(CX*1)
	VMOVUPS Z9, 64(R13)(CX*1)
	VMOVUPS Z10, 128(R13)(CX*1)
	VMOVUPS Z11, 192(R13)(CX*1)
	ADDQ    $256, CX
	CMPQ    CX, R11
	JLT     tile512
	VZEROUPPER
	RET
