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

// The words of tap j (0-3) of sixteen channels among the 64 bf16 taps of those channels
// (channel-major, four a channel), for VPERMT2W: words j, j+4, ..., j+60 into the low
// sixteen words (the high ones are not read).
DATA convTapWords<>+0(SB)/8, $0x000c000800040000
DATA convTapWords<>+8(SB)/8, $0x001c001800140010
DATA convTapWords<>+16(SB)/8, $0x002c002800240020
DATA convTapWords<>+24(SB)/8, $0x003c003800340030
DATA convTapWords<>+64(SB)/8, $0x000d000900050001
DATA convTapWords<>+72(SB)/8, $0x001d001900150011
DATA convTapWords<>+80(SB)/8, $0x002d002900250021
DATA convTapWords<>+88(SB)/8, $0x003d003900350031
DATA convTapWords<>+128(SB)/8, $0x000e000a00060002
DATA convTapWords<>+136(SB)/8, $0x001e001a00160012
DATA convTapWords<>+144(SB)/8, $0x002e002a00260022
DATA convTapWords<>+152(SB)/8, $0x003e003a00360032
DATA convTapWords<>+192(SB)/8, $0x000f000b00070003
DATA convTapWords<>+200(SB)/8, $0x001f001b00170013
DATA convTapWords<>+208(SB)/8, $0x002f002b00270023
DATA convTapWords<>+216(SB)/8, $0x003f003b00370033
GLOBL convTapWords<>(SB), RODATA|NOPTR, $256

// func conv4StepAVX512(y, x0, x1, x2, x3 *float32, w *uint16, n int)
//
// conv4Step for one token over n channels (a multiple of 16), sixteen a step, from the
// bf16 taps as stored (channel-major, four a channel): each tap's sixteen words are picked
// out of the block's 64 by VPERMT2W and widened to float32 (a bf16 is a float32's high
// half), then y[c] = (((0 + w0·x0[c]) + w1·x1[c]) + w2·x2[c]) + w3·x3[c], each product
// rounded and added in turn as the Go loop does (no FMA: the same bits).
TEXT ·conv4StepAVX512(SB), NOSPLIT, $0-56
	MOVQ y+0(FP), DI
	MOVQ x0+8(FP), R10
	MOVQ x1+16(FP), R11
	MOVQ x2+24(FP), R12
	MOVQ x3+32(FP), R13
	MOVQ w+40(FP), R9
	MOVQ n+48(FP), CX
	SHLQ $2, CX                 // bytes of n floats
	JZ   stepdone
	LEAQ convTapWords<>(SB), R8
	VMOVDQU16 (R8), Z10
	VMOVDQU16 64(R8), Z11
	VMOVDQU16 128(R8), Z12
	VMOVDQU16 192(R8), Z13
	XORQ AX, AX                 // byte offset of the channel block in the float rows

step:
	VMOVDQU16 (R9)(AX*2), Z0    // taps of channels 0-7 of the block
	VMOVDQU16 64(R9)(AX*2), Z1  // and of channels 8-15
	VPXORD    Z3, Z3, Z3

	VMOVDQA64  Z0, Z4
	VPERMT2W   Z1, Z10, Z4
	VPMOVZXWD  Y4, Z4
	VPSLLD     $16, Z4, Z4
	VMULPS     (R10)(AX*1), Z4, Z4
	VADDPS     Z4, Z3, Z3

	VMOVDQA64  Z0, Z5
	VPERMT2W   Z1, Z11, Z5
	VPMOVZXWD  Y5, Z5
	VPSLLD     $16, Z5, Z5
	VMULPS     (R11)(AX*1), Z5, Z5
	VADDPS     Z5, Z3, Z3

	VMOVDQA64  Z0, Z6
	VPERMT2W   Z1, Z12, Z6
	VPMOVZXWD  Y6, Z6
	VPSLLD     $16, Z6, Z6
	VMULPS     (R12)(AX*1), Z6, Z6
	VADDPS     Z6, Z3, Z3

	VPERMT2W   Z1, Z13, Z0
	VPMOVZXWD  Y0, Z0
	VPSLLD     $16, Z0, Z0
	VMULPS     (R13)(AX*1), Z0, Z0
	VADDPS     Z0, Z3, Z3

	VMOVUPS Z3, (DI)(AX*1)
	ADDQ    $64, AX
	CMPQ    AX, CX
	JLT     step

stepdone:
	VZEROUPPER
	RET
