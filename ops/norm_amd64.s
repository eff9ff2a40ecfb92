// AVX kernels of the norms' elementwise passes (norm.go).

#include "textflag.h"

// func scaleRowsAVX(y, x, w *float32, a, b float32, n int)
//
// y[i] = (x[i]·a)·w[i], or (x[i]·a)·b where w is nil, for n floats (a multiple of 8):
// two rounded products in the Go loops' order (no FMA), so the same bits.
TEXT ·scaleRowsAVX(SB), NOSPLIT, $0-40
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         w+16(FP), DX
	VBROADCASTSS a+24(FP), Y1
	VBROADCASTSS b+28(FP), Y2
	MOVQ         n+32(FP), CX
	SHLQ         $2, CX
	JZ           scaledone
	XORQ         AX, AX
	TESTQ        DX, DX
	JZ           byconst

byrow:
	VMULPS  (SI)(AX*1), Y1, Y0
	VMULPS  (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, CX
	JLT     byrow
	JMP     scaledone

byconst:
	VMULPS  (SI)(AX*1), Y1, Y0
	VMULPS  Y2, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, CX
	JLT     byconst

scaledone:
	VZEROUPPER
	RET

// func addRowsAVX(s, a, b *float32, n int)
//
// s[i] = a[i] + b[i] for n floats (a multiple of 8).
TEXT ·addRowsAVX(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHLQ $2, CX
	JZ   adddone
	XORQ AX, AX

addloop:
	VMOVUPS (SI)(AX*1), Y0
	VADDPS  (DX)(AX*1), Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, CX
	JLT     addloop

adddone:
	VZEROUPPER
	RET
