#include "textflag.h"

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
// n > 0 a multiple of 8: each bf16 is the top half of its float32.
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loop:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       loop
	VZEROUPPER
	RET
