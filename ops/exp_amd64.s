// AVX-512 float64 exponentials with math.Exp's bits (exp.go): the steps of Go's own
// amd64 math.Exp (src/math/exp_amd64.s, its FMA path, which this machine's math.Exp
// takes: AVX-512 implies AVX and FMA) in eight lanes, each lane the same operations on
// the same values in the same order. An input that Go's routine sends down another path
// (not finite, above its overflow bound, a power of two outside the normal exponents:
// overflow, underflow, subnormal results) stops the kernel before its group of eight,
// and the caller takes that group with math.Exp itself. The method and its constants are
// Naoki Shibata's (ISC'10; SLEEF, public domain), which Go's routine follows: identical
// bits need the identical series, reduction and constants.

#include "textflag.h"

DATA expConst<>+0(SB)/8, $1.4426950408889634073599246810018920   // log2(e)
DATA expConst<>+8(SB)/8, $0.69314718055966295651160180568695068359375 // ln 2, upper part
DATA expConst<>+16(SB)/8, $0.28235290563031577122588448175013436025525412068e-12 // ln 2, lower part
DATA expConst<>+24(SB)/8, $0.0625
DATA expConst<>+32(SB)/8, $2.4801587301587301587e-5
DATA expConst<>+40(SB)/8, $1.9841269841269841270e-4
DATA expConst<>+48(SB)/8, $1.3888888888888888889e-3
DATA expConst<>+56(SB)/8, $8.3333333333333333333e-3
DATA expConst<>+64(SB)/8, $4.1666666666666666667e-2
DATA expConst<>+72(SB)/8, $1.6666666666666666667e-1
DATA expConst<>+80(SB)/8, $0.5
DATA expConst<>+88(SB)/8, $1.0
DATA expConst<>+96(SB)/8, $2.0
DATA expConst<>+104(SB)/8, $7.09782712893384e+02 // math.Exp's overflow bound
DATA expConst<>+112(SB)/8, $1023
DATA expConst<>+120(SB)/4, $1022
DATA expConst<>+124(SB)/4, $2045
DATA expConst<>+128(SB)/8, $0x8000000000000000
GLOBL expConst<>(SB), RODATA|NOPTR, $136

// EXPCONSTS loads the constants: Z16 log2(e), Z17 and Z18 ln 2's parts, Z19 1/16, Z20-Z25
// the series' coefficients from the highest, Z26 1/2, Z27 1, Z28 2, Z29 the overflow bound,
// Z30 the exponent bias (int64), Y31 1022 and Y15 2045 (int32), Z14 the sign bit.
#define EXPCONSTS \
	LEAQ         expConst<>(SB), R8; \
	VBROADCASTSD (R8), Z16; \
	VBROADCASTSD 8(R8), Z17; \
	VBROADCASTSD 16(R8), Z18; \
	VBROADCASTSD 24(R8), Z19; \
	VBROADCASTSD 32(R8), Z20; \
	VBROADCASTSD 40(R8), Z21; \
	VBROADCASTSD 48(R8), Z22; \
	VBROADCASTSD 56(R8), Z23; \
	VBROADCASTSD 64(R8), Z24; \
	VBROADCASTSD 72(R8), Z25; \
	VBROADCASTSD 80(R8), Z26; \
	VBROADCASTSD 88(R8), Z27; \
	VBROADCASTSD 96(R8), Z28; \
	VBROADCASTSD 104(R8), Z29; \
	VPBROADCASTQ 112(R8), Z30; \
	VPBROADCASTD 120(R8), Y31; \
	VPBROADCASTD 124(R8), Y15; \
	VPBROADCASTQ 128(R8), Z14

// EXP8 replaces the eight float64 in Z0 with their exponentials, or jumps to bad when a
// lane would leave math.Exp's main path: x not at most the overflow bound (above it, or
// NaN: the compare's unordered case), or k = round(x·log2(e)) (to even, as CVTSD2SL)
// with k+1023 outside [1, 2046] (k+1022 above 2045, unsigned). Then, as Go's routine:
// x - k·ln2 in two fused steps, /16, the series, four squarings with the 2s, times 2^k
// built as the biased exponent in place. Uses Z1-Z3, K1, K2.
#define EXP8(bad) \
	VCMPPD      $0x16, Z29, Z0, K1; \
	KORTESTW    K1, K1; \
	JNZ         bad; \
	VMULPD      Z16, Z0, Z1; \
	VCVTPD2DQ   Z1, Y2; \
	VPADDD      Y31, Y2, Y3; \
	VPCMPUD     $6, Y15, Y3, K2; \
	KORTESTW    K2, K2; \
	JNZ         bad; \
	VCVTDQ2PD   Y2, Z1; \
	VFNMADD231PD Z17, Z1, Z0; \
	VFNMADD231PD Z18, Z1, Z0; \
	VMULPD      Z19, Z0, Z0; \
	VMOVAPD     Z20, Z1; \
	VFMADD213PD Z21, Z0, Z1; \
	VFMADD213PD Z22, Z0, Z1; \
	VFMADD213PD Z23, Z0, Z1; \
	VFMADD213PD Z24, Z0, Z1; \
	VFMADD213PD Z25, Z0, Z1; \
	VFMADD213PD Z26, Z0, Z1; \
	VFMADD213PD Z27, Z0, Z1; \
	VMULPD      Z1, Z0, Z0; \
	VADDPD      Z28, Z0, Z1; \
	VMULPD      Z1, Z0, Z0; \
	VADDPD      Z28, Z0, Z1; \
	VMULPD      Z1, Z0, Z0; \
	VADDPD      Z28, Z0, Z1; \
	VMULPD      Z1, Z0, Z0; \
	VADDPD      Z28, Z0, Z1; \
	VFMADD213PD Z27, Z1, Z0; \
	VPMOVSXDQ   Y2, Z3; \
	VPADDQ      Z30, Z3, Z3; \
	VPSLLQ      $52, Z3, Z3; \
	VMULPD      Z3, Z0, Z0

// func sigmoidGateAVX512(x, a, gate *float32, n int) int
//
// x[i] = a[i]·float32(1/(1 + exp(-float64(gate[i])))) (sigmoid, elementwise.go) for the
// groups of eight of n from the start, up to the first whose exponentials leave
// math.Exp's main path; returns how many elements it did.
TEXT ·sigmoidGateAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ gate+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	XORQ AX, AX
	TESTQ CX, CX
	JZ   sgdone
	EXPCONSTS

sgloop:
	VCVTPS2PD (DX)(AX*4), Z0
	VPXORQ    Z14, Z0, Z0
	EXP8(sgdone)
	VADDPD    Z27, Z0, Z0
	VDIVPD    Z0, Z27, Z0
	VCVTPD2PS Z0, Y0
	VMULPS    (SI)(AX*4), Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	DECQ      CX
	JNZ       sgloop

sgdone:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// func expShiftedAVX512(p, l *float32, m float32, n int) int
//
// p[i] = float32(exp(float64(l[i] - m))) (the router's softmax numerators, moe.go) for
// the groups of eight of n from the start, up to the first whose exponentials leave
// math.Exp's main path; returns how many elements it did.
TEXT ·expShiftedAVX512(SB), NOSPLIT, $0-40
	MOVQ         p+0(FP), DI
	MOVQ         l+8(FP), SI
	VBROADCASTSS m+16(FP), Y13
	MOVQ         n+24(FP), CX
	SHRQ         $3, CX
	XORQ         AX, AX
	TESTQ        CX, CX
	JZ           esdone
	EXPCONSTS

esloop:
	VMOVUPS   (SI)(AX*4), Y0
	VSUBPS    Y13, Y0, Y0
	VCVTPS2PD Y0, Z0
	EXP8(esdone)
	VCVTPD2PS Z0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	DECQ      CX
	JNZ       esloop

esdone:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET
