// AVX2 kernel of the int16-activation q4 matrix-vector product: qmatmul_int16_amd64.s's
// on 256-bit registers, for machines without AVX-512 BW and VNNI. Per group of 64
// weights its 32 code bytes widen in two halves of 16 (VPMOVZXBW), the high nibbles
// shifted down and the low ones masked, and four VPMADDWD meet them with the group's even
// and odd activations; three VPADDD leave the group's exact products in 8 dword lanes (at
// most eight of 491,505 a lane), converted once and added to the row's float32 sums times
// the group's s·sx, broadcast from the stack where each unit of 8 groups' scales was
// computed. A last unit of fewer than 8 groups has its scales and biases copied into
// zeroed stack slots first, so no load reads past a row's last group. Two groups a step,
// into Y0 and Y5; the bias term one FMA per unit into Y8; Y9 the low-nibble mask. X15
// and R14 are left alone (ABIInternal's zero and g registers).

#include "textflag.h"

DATA int16LowNibbles<>+0(SB)/4, $0x000f000f
GLOBL int16LowNibbles<>(SB), RODATA|NOPTR, $4

// GROUP adds the group whose codes are at c(SI) and whose activations are at a(DI), times
// the scale at s(R15), to acc.
#define GROUP(c, a, s, acc) \
	VPMOVZXBW    c(SI), Y1; \
	VPMOVZXBW    c+16(SI), Y2; \
	VPSRLW       $4, Y1, Y3; \
	VPSRLW       $4, Y2, Y4; \
	VPAND        Y9, Y1, Y1; \
	VPAND        Y9, Y2, Y2; \
	VPMADDWD     a(DI), Y1, Y1; \
	VPMADDWD     a+32(DI), Y2, Y2; \
	VPMADDWD     a+64(DI), Y3, Y3; \
	VPMADDWD     a+96(DI), Y4, Y4; \
	VPADDD       Y2, Y1, Y1; \
	VPADDD       Y4, Y3, Y3; \
	VPADDD       Y3, Y1, Y1; \
	VCVTDQ2PS    Y1, Y1; \
	VBROADCASTSS s(R15), Y2; \
	VFMADD231PS  Y2, Y1, acc

// func q4Int16Dot1AVX2Asm(codes *byte, scales, biases *uint16, groups, rows int, acts *byte, sx, xsum *float32, out *float32, ahead int)
//
// q4Int16Dot1VNNI's contract on AVX2 and FMA.
TEXT ·q4Int16Dot1AVX2Asm(SB), NOSPLIT, $64-80
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ rows+32(FP), BX
	MOVQ out+64(FP), DX
	MOVQ ahead+72(FP), R11

	VPBROADCASTD int16LowNibbles<>(SB), Y9

q4i16a2row:
	MOVQ   groups+24(FP), R10
	MOVQ   acts+40(FP), DI
	MOVQ   sx+48(FP), R12
	MOVQ   xsum+56(FP), R13
	VXORPS Y0, Y0, Y0
	VXORPS Y5, Y5, Y5
	VXORPS Y8, Y8, Y8

q4i16a2unit:
	// CX = the unit's groups, min(8, left).
	MOVQ    $8, CX
	CMPQ    R10, CX
	CMOVQLT R10, CX
	SUBQ    CX, R10
	CMPQ    CX, $8
	JEQ     q4i16a2whole

	// A partial unit: its scales at 32(SP), its biases at 48(SP), zeros past them.
	VPXOR   X6, X6, X6
	VMOVDQU X6, 32(SP)
	VMOVDQU X6, 48(SP)
	XORQ    AX, AX

q4i16a2copy:
	MOVWLZX (R8)(AX*2), R15
	MOVW    R15, 32(SP)(AX*2)
	MOVWLZX (R9)(AX*2), R15
	MOVW    R15, 48(SP)(AX*2)
	INCQ    AX
	CMPQ    AX, CX
	JLT     q4i16a2copy
	VPMOVZXWD 32(SP), Y6
	VPMOVZXWD 48(SP), Y7
	JMP       q4i16a2scaled

q4i16a2whole:
	VPMOVZXWD (R8), Y6
	VPMOVZXWD (R9), Y7

q4i16a2scaled:
	VPSLLD      $16, Y6, Y6
	VMULPS      (R12), Y6, Y6
	VMOVUPS     Y6, 0(SP)
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (R13), Y7, Y8
	LEAQ        (R8)(CX*2), R8
	LEAQ        (R9)(CX*2), R9
	ADDQ        $32, R12
	ADDQ        $32, R13
	LEAQ        0(SP), R15

q4i16a2pair:
	CMPQ       CX, $2
	JLT        q4i16a2single
	PREFETCHT0 (SI)(R11*1)
	GROUP(0, 0, 0, Y0)
	GROUP(32, 128, 4, Y5)
	ADDQ       $64, SI
	ADDQ       $256, DI
	ADDQ       $8, R15
	SUBQ       $2, CX
	JMP        q4i16a2pair

q4i16a2single:
	TESTQ      CX, CX
	JZ         q4i16a2unitdone
	PREFETCHT0 (SI)(R11*1)
	GROUP(0, 0, 0, Y0)
	ADDQ       $32, SI
	ADDQ       $128, DI

q4i16a2unitdone:
	TESTQ R10, R10
	JNZ   q4i16a2unit

	VADDPS       Y5, Y0, Y0
	VADDPS       Y8, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (DX)
	ADDQ         $4, DX
	DECQ         BX
	JNZ          q4i16a2row

	VZEROUPPER
	RET
