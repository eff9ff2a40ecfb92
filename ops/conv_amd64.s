// AVX kernel of the Gated DeltaNet's four-tap short conv over a run of tokens (conv.go).

#include "textflag.h"

// func conv4RowsAVX(y, x *float32, stride int, w *float32, n, T int)
//
// For each of T tokens and each block of eight of n channels (n a multiple of 8):
// y[t][c] = (((0 + w0·x[t][c]) + w1·x[t+1][c]) + w2·x[t+2][c]) + w3·x[t+3][c], rows of
// y and x stride floats apart, each product rounded and then added as conv4Step's Go
// loop does (no FMA: the same bits). w holds per block of eight channels tap 0 of the
// eight, then taps 1, 2 and 3 (32 floats, 128 bytes a block), so the block of the
// channels at byte offset AX (4 a channel) starts at byte 4·AX of w.
TEXT ·conv4RowsAVX(SB), NOSPLIT, $0-48
	MOVQ  y+0(FP), DI
	MOVQ  x+8(FP), SI
	MOVQ  stride+16(FP), R8
	SHLQ  $2, R8               // bytes between rows
	MOVQ  w+24(FP), R9
	MOVQ  n+32(FP), R10
	SHLQ  $2, R10              // bytes of a row's n channels
	MOVQ  T+40(FP), R11
	TESTQ R11, R11
	JZ    done
	TESTQ R10, R10
	JZ    done

token:
	LEAQ (SI)(R8*1), R12 // rows t+1, t+2, t+3
	LEAQ (R12)(R8*1), R13
	LEAQ (R13)(R8*1), DX
	XORQ AX, AX

block:
	VXORPS  Y0, Y0, Y0
	VMOVUPS (R9)(AX*4), Y1
	VMULPS  (SI)(AX*1), Y1, Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS 32(R9)(AX*4), Y2
	VMULPS  (R12)(AX*1), Y2, Y2
	VADDPS  Y2, Y0, Y0
	VMOVUPS 64(R9)(AX*4), Y3
	VMULPS  (R13)(AX*1), Y3, Y3
	VADDPS  Y3, Y0, Y0
	VMOVUPS 96(R9)(AX*4), Y4
	VMULPS  (DX)(AX*1), Y4, Y4
	VADDPS  Y4, Y0, Y0
	VMOVUPS Y0, (DI)(AX*1)
	ADDQ    $32, AX
	CMPQ    AX, R10
	JLT     block

	ADDQ R8, SI
	ADDQ R8, DI
	DECQ R11
	JNZ  token

done:
	VZEROUPPER
	RET
