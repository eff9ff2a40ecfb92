// AVX-512 kernel of the int16-activation q4 matrix-vector product (see qmatmul_int16.go
// for the activation layout). Per group of 64 weights of a row: its 32 code bytes widened
// to 32 words (VPMOVZXBW), the high nibbles shifted down and the low ones masked, met by
// the group's 32 even and 32 odd int16 activations in two multiply-adds (VPMADDWD, then
// VPDPWSSD on top: exact int32 sums, four products a lane), converted once and added to
// the row's float32 sums times the group's s·sx, broadcast from the stack where each unit
// of 16 groups' scales was computed (VPMOVZXWD of 16 bf16, shifted into float32, times
// the activations' sx). Two groups a step, into Z0 and Z5 (two FMA chains); the bias term
// b·sx·Σxq one FMA per 16 groups into Z8. Z31 holds the low-nibble mask. X15 and R14 are
// left alone (ABIInternal's zero and g registers).

#include "textflag.h"

// func q4Int16Dot1VNNI(codes *byte, scales, biases *uint16, groups, rows int, acts *byte, sx, xsum *float32, out *float32, ahead int)
//
// out[r] = the dot of one int16 activation row (acts, groups groups; sx and xsum its
// tables) with each of rows consecutive weight rows of groups groups: decode's
// matrix-vector product. Each pair of groups asks for the weight bytes ahead bytes past
// it (int8RowAhead, the int8 row kernel's distance: the same bytes per weight).
TEXT ·q4Int16Dot1VNNI(SB), NOSPLIT, $64-80
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ rows+32(FP), BX
	MOVQ out+64(FP), DX
	MOVQ ahead+72(FP), R11

	MOVL         $0x000f000f, AX
	VPBROADCASTD AX, Z31

q4i16row:
	MOVQ   groups+24(FP), R10
	MOVQ   acts+40(FP), DI
	MOVQ   sx+48(FP), R12
	MOVQ   xsum+56(FP), R13
	VPXORD Z0, Z0, Z0
	VPXORD Z5, Z5, Z5
	VPXORD Z8, Z8, Z8

q4i16unit:
	// CX = the unit's groups, min(16, left); K2 their lanes.
	MOVQ    $16, CX
	CMPQ    R10, CX
	CMOVQLT R10, CX
	SUBQ    CX, R10
	MOVL    $1, AX
	SHLL    CX, AX
	DECL    AX
	KMOVW   AX, K2

	VPMOVZXWD.Z (R8), K2, Z6
	VPSLLD      $16, Z6, Z6
	VMULPS      (R12), Z6, Z6
	VMOVUPS     Z6, 0(SP)
	VPMOVZXWD.Z (R9), K2, Z7
	VPSLLD      $16, Z7, Z7
	VFMADD231PS (R13), Z7, Z8
	LEAQ        (R8)(CX*2), R8
	LEAQ        (R9)(CX*2), R9
	ADDQ        $64, R12
	ADDQ        $64, R13
	LEAQ        0(SP), R15

q4i16pair:
	CMPQ CX, $2
	JLT  q4i16single
	PREFETCHT0       (SI)(R11*1)
	VPMOVZXBW        (SI), Z1
	VPMOVZXBW        32(SI), Z2
	VPSRLW           $4, Z1, Z3
	VPSRLW           $4, Z2, Z4
	VPANDD           Z31, Z1, Z1
	VPANDD           Z31, Z2, Z2
	VPMADDWD         (DI), Z1, Z1
	VPMADDWD         128(DI), Z2, Z2
	VPDPWSSD         64(DI), Z3, Z1
	VPDPWSSD         192(DI), Z4, Z2
	VCVTDQ2PS        Z1, Z1
	VCVTDQ2PS        Z2, Z2
	VFMADD231PS.BCST (R15), Z1, Z0
	VFMADD231PS.BCST 4(R15), Z2, Z5
	ADDQ             $64, SI
	ADDQ             $256, DI
	ADDQ             $8, R15
	SUBQ             $2, CX
	JMP              q4i16pair

q4i16single:
	TESTQ            CX, CX
	JZ               q4i16unitdone
	PREFETCHT0       (SI)(R11*1)
	VPMOVZXBW        (SI), Z1
	VPSRLW           $4, Z1, Z3
	VPANDD           Z31, Z1, Z1
	VPMADDWD         (DI), Z1, Z1
	VPDPWSSD         64(DI), Z3, Z1
	VCVTDQ2PS        Z1, Z1
	VFMADD231PS.BCST (R15), Z1, Z0
	ADDQ             $32, SI
	ADDQ             $128, DI

q4i16unitdone:
	TESTQ R10, R10
	JNZ   q4i16unit

	VADDPS        Z5, Z0, Z0
	VADDPS        Z8, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	MOVSS         X0, (DX)
	ADDQ          $4, DX
	DECQ          BX
	JNZ           q4i16row

	VZEROUPPER
	RET
