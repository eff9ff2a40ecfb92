// AVX-512 kernels of the quantized row dots (see qkernels.go and qkernels_amd64.go).
// They dequantize in registers instead of using the group sums: for q4 each group's 16
// possible values s·q + b are a 16-entry float table, and VPERMPS, which reads only the
// low 4 bits of each index, maps a code to its value with one instruction (the low
// nibble needs no mask, the high one a shift). A unit is 64 codes; q4 takes them as 4
// runs of 16 lanes: the low then the high nibbles of bytes 0-15, then of bytes 16-31,
// which is why q4 activations arrive interleaved by 32 (the 16 even, then the 16 odd
// elements of each 32). q8 converts the codes and applies s·q + b with one FMA.
// Z0-Z15 hold accumulators and codes; Z16-Z18 constants and the table. X15 and R14 are
// left alone (ABIInternal's zero and g registers).

#include "textflag.h"

DATA iota16<>+0(SB)/4, $0x00000000
DATA iota16<>+4(SB)/4, $0x3f800000
DATA iota16<>+8(SB)/4, $0x40000000
DATA iota16<>+12(SB)/4, $0x40400000
DATA iota16<>+16(SB)/4, $0x40800000
DATA iota16<>+20(SB)/4, $0x40a00000
DATA iota16<>+24(SB)/4, $0x40c00000
DATA iota16<>+28(SB)/4, $0x40e00000
DATA iota16<>+32(SB)/4, $0x41000000
DATA iota16<>+36(SB)/4, $0x41100000
DATA iota16<>+40(SB)/4, $0x41200000
DATA iota16<>+44(SB)/4, $0x41300000
DATA iota16<>+48(SB)/4, $0x41400000
DATA iota16<>+52(SB)/4, $0x41500000
DATA iota16<>+56(SB)/4, $0x41600000
DATA iota16<>+60(SB)/4, $0x41700000
GLOBL iota16<>(SB), RODATA|NOPTR, $64

// SCALEBIAS broadcasts the group's scale into Z17 and bias into Z18 (bf16 -> f32).
#define SCALEBIAS \
	MOVWLZX      (R8), AX; \
	SHLL         $16, AX; \
	VPBROADCASTD AX, Z17; \
	MOVWLZX      (R9), AX; \
	SHLL         $16, AX; \
	VPBROADCASTD AX, Z18

// HSUM16 reduces Z(a) to its lane sum in the low lane of X(a), using Y(t)/X(t).
#define HSUM16(za, ya, xa, yt, xt) \
	VEXTRACTF64X4 $1, za, yt; \
	VADDPS        yt, ya, ya; \
	VEXTRACTF128  $1, ya, xt; \
	VADDPS        xt, xa, xa; \
	VHADDPS       xa, xa, xa; \
	VHADDPS       xa, xa, xa

// DOT4ROWS multiplies the four decoded runs Z8..Z11 (elements at x offsets 0, 64, 128,
// 192 bytes) with the four activation rows; row p accumulates into Z(2p) and Z(2p+1).
#define DOT4ROWS \
	VFMADD231PS (DI), Z8, Z0; \
	VFMADD231PS 64(DI), Z9, Z1; \
	VFMADD231PS 128(DI), Z10, Z0; \
	VFMADD231PS 192(DI), Z11, Z1; \
	VFMADD231PS (DI)(BX*1), Z8, Z2; \
	VFMADD231PS 64(DI)(BX*1), Z9, Z3; \
	VFMADD231PS 128(DI)(BX*1), Z10, Z2; \
	VFMADD231PS 192(DI)(BX*1), Z11, Z3; \
	VFMADD231PS (DI)(BX*2), Z8, Z4; \
	VFMADD231PS 64(DI)(BX*2), Z9, Z5; \
	VFMADD231PS 128(DI)(BX*2), Z10, Z4; \
	VFMADD231PS 192(DI)(BX*2), Z11, Z5; \
	VFMADD231PS (R12), Z8, Z6; \
	VFMADD231PS 64(R12), Z9, Z7; \
	VFMADD231PS 128(R12), Z10, Z6; \
	VFMADD231PS 192(R12), Z11, Z7; \
	ADDQ        $256, DI; \
	ADDQ        $256, R12

// DOT4STORE reduces the row accumulators to [r0 r1 r2 r3] and stores them at R13.
#define DOT4STORE \
	VADDPS        Z1, Z0, Z0; \
	VADDPS        Z3, Z2, Z2; \
	VADDPS        Z5, Z4, Z4; \
	VADDPS        Z7, Z6, Z6; \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS        Y1, Y0, Y0; \
	VEXTRACTF64X4 $1, Z2, Y3; \
	VADDPS        Y3, Y2, Y2; \
	VEXTRACTF64X4 $1, Z4, Y5; \
	VADDPS        Y5, Y4, Y4; \
	VEXTRACTF64X4 $1, Z6, Y7; \
	VADDPS        Y7, Y6, Y6; \
	VHADDPS       Y2, Y0, Y0; \
	VHADDPS       Y6, Y4, Y4; \
	VHADDPS       Y4, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0; \
	VMOVUPS       X0, (R13); \
	VZEROUPPER; \
	RET

#define DOT4PROLOGUE \
	MOVQ   codes+0(FP), SI; \
	MOVQ   scales+8(FP), R8; \
	MOVQ   biases+16(FP), R9; \
	MOVQ   groups+24(FP), CX; \
	MOVQ   units+32(FP), R10; \
	MOVQ   x+40(FP), DI; \
	MOVQ   xStride+48(FP), BX; \
	MOVQ   out+64(FP), R13; \
	LEAQ   (DI)(BX*2), R12; \
	ADDQ   BX, R12; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7

// Q4DOT8ROW multiplies the four decoded runs Z8..Z11 with one activation row at addr
// (elements at byte offsets 0, 64, 128, 192) into acc.
#define Q4DOT8ROW(addr0, addr1, addr2, addr3, acc) \
	VFMADD231PS addr0, Z8, acc; \
	VFMADD231PS addr1, Z9, acc; \
	VFMADD231PS addr2, Z10, acc; \
	VFMADD231PS addr3, Z11, acc

// func q4Dot1AVX512(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32
TEXT ·q4Dot1AVX512(SB), NOSPLIT, $0-60
	MOVQ    codes+0(FP), SI
	MOVQ    scales+8(FP), R8
	MOVQ    biases+16(FP), R9
	MOVQ    groups+24(FP), CX
	MOVQ    units+32(FP), R10
	MOVQ    x+40(FP), DI
	VMOVUPS iota16<>(SB), Z16
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	VPXORD  Z2, Z2, Z2
	VPXORD  Z3, Z3, Z3

q4d1g:
	PREFETCHT0  8192(SI) // the weights stream from memory: ask ahead
	SCALEBIAS
	VFMADD231PS Z16, Z17, Z18 // table: s·q + b for q = 0..15
	MOVQ        R10, DX

q4d1u:
	VPMOVZXBD   (SI), Z4
	VPMOVZXBD   16(SI), Z6
	VPSRLD      $4, Z4, Z5
	VPSRLD      $4, Z6, Z7
	VPERMPS     Z18, Z4, Z4
	VPERMPS     Z18, Z5, Z5
	VPERMPS     Z18, Z6, Z6
	VPERMPS     Z18, Z7, Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $32, SI
	ADDQ        $256, DI
	DECQ        DX
	JNZ         q4d1u
	ADDQ        $2, R8
	ADDQ        $2, R9
	DECQ        CX
	JNZ         q4d1g

	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM16(Z0, Y0, X0, Y1, X1)
	VZEROUPPER
	MOVSS  X0, ret+56(FP)
	RET

// func q8Dot1AVX512(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32
TEXT ·q8Dot1AVX512(SB), NOSPLIT, $0-60
	MOVQ   codes+0(FP), SI
	MOVQ   scales+8(FP), R8
	MOVQ   biases+16(FP), R9
	MOVQ   groups+24(FP), CX
	MOVQ   units+32(FP), R10
	MOVQ   x+40(FP), DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3

q8d1g:
	PREFETCHT0 8192(SI)
	SCALEBIAS
	MOVQ R10, DX

q8d1u:
	VPMOVZXBD   (SI), Z4
	VPMOVZXBD   16(SI), Z5
	VPMOVZXBD   32(SI), Z6
	VPMOVZXBD   48(SI), Z7
	VCVTDQ2PS   Z4, Z4
	VCVTDQ2PS   Z5, Z5
	VCVTDQ2PS   Z6, Z6
	VCVTDQ2PS   Z7, Z7
	VFMADD213PS Z18, Z17, Z4 // s·q + b
	VFMADD213PS Z18, Z17, Z5
	VFMADD213PS Z18, Z17, Z6
	VFMADD213PS Z18, Z17, Z7
	VFMADD231PS (DI), Z4, Z0
	VFMADD231PS 64(DI), Z5, Z1
	VFMADD231PS 128(DI), Z6, Z2
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ        $64, SI
	ADDQ        $256, DI
	DECQ        DX
	JNZ         q8d1u
	ADDQ        $2, R8
	ADDQ        $2, R9
	DECQ        CX
	JNZ         q8d1g

	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	HSUM16(Z0, Y0, X0, Y1, X1)
	VZEROUPPER
	MOVSS  X0, ret+56(FP)
	RET

// func q4Dot4AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)
TEXT ·q4Dot4AVX512(SB), NOSPLIT, $0-72
	DOT4PROLOGUE
	VMOVUPS iota16<>(SB), Z16

q4d4g:
	PREFETCHT0  4096(SI)
	SCALEBIAS
	VFMADD231PS Z16, Z17, Z18
	MOVQ        R10, DX

q4d4u:
	VPMOVZXBD (SI), Z8
	VPMOVZXBD 16(SI), Z10
	VPSRLD    $4, Z8, Z9
	VPSRLD    $4, Z10, Z11
	VPERMPS   Z18, Z8, Z8
	VPERMPS   Z18, Z9, Z9
	VPERMPS   Z18, Z10, Z10
	VPERMPS   Z18, Z11, Z11
	DOT4ROWS
	ADDQ      $32, SI
	DECQ      DX
	JNZ       q4d4u
	ADDQ      $2, R8
	ADDQ      $2, R9
	DECQ      CX
	JNZ       q4d4g
	DOT4STORE

// func q8Dot4AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)
TEXT ·q8Dot4AVX512(SB), NOSPLIT, $0-72
	DOT4PROLOGUE

q8d4g:
	PREFETCHT0 4096(SI)
	SCALEBIAS
	MOVQ R10, DX

q8d4u:
	VPMOVZXBD   (SI), Z8
	VPMOVZXBD   16(SI), Z9
	VPMOVZXBD   32(SI), Z10
	VPMOVZXBD   48(SI), Z11
	VCVTDQ2PS   Z8, Z8
	VCVTDQ2PS   Z9, Z9
	VCVTDQ2PS   Z10, Z10
	VCVTDQ2PS   Z11, Z11
	VFMADD213PS Z18, Z17, Z8
	VFMADD213PS Z18, Z17, Z9
	VFMADD213PS Z18, Z17, Z10
	VFMADD213PS Z18, Z17, Z11
	DOT4ROWS
	ADDQ        $64, SI
	DECQ        DX
	JNZ         q8d4u
	ADDQ        $2, R8
	ADDQ        $2, R9
	DECQ        CX
	JNZ         q8d4g
	DOT4STORE

// Q4DOT8REDUCE reduces the eight row accumulators Z0..Z7 to [r0 .. r7] at out (Y17 a
// temporary): q4Dot8AVX512's and q4Dot8x2AVX512's ending.
#define Q4DOT8REDUCE(out) \
	VEXTRACTF64X4 $1, Z0, Y17; \
	VADDPS        Y17, Y0, Y0; \
	VEXTRACTF64X4 $1, Z1, Y17; \
	VADDPS        Y17, Y1, Y1; \
	VEXTRACTF64X4 $1, Z2, Y17; \
	VADDPS        Y17, Y2, Y2; \
	VEXTRACTF64X4 $1, Z3, Y17; \
	VADDPS        Y17, Y3, Y3; \
	VEXTRACTF64X4 $1, Z4, Y17; \
	VADDPS        Y17, Y4, Y4; \
	VEXTRACTF64X4 $1, Z5, Y17; \
	VADDPS        Y17, Y5, Y5; \
	VEXTRACTF64X4 $1, Z6, Y17; \
	VADDPS        Y17, Y6, Y6; \
	VEXTRACTF64X4 $1, Z7, Y17; \
	VADDPS        Y17, Y7, Y7; \
	VHADDPS       Y1, Y0, Y0; \
	VHADDPS       Y3, Y2, Y2; \
	VHADDPS       Y5, Y4, Y4; \
	VHADDPS       Y7, Y6, Y6; \
	VHADDPS       Y2, Y0, Y0; \
	VHADDPS       Y6, Y4, Y4; \
	VPERM2F128    $0x20, Y4, Y0, Y1; \
	VPERM2F128    $0x31, Y4, Y0, Y2; \
	VADDPS        Y2, Y1, Y1; \
	VMOVUPS       Y1, out

// func q4Dot8AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, out *[8]float32)
// Eight activation rows (xStride bytes apart) against one q4 row: each decoded code feeds
// eight multiply-adds, twice as many as in q4Dot4AVX512.
TEXT ·q4Dot8AVX512(SB), NOSPLIT, $0-64
	MOVQ    codes+0(FP), SI
	MOVQ    scales+8(FP), R8
	MOVQ    biases+16(FP), R9
	MOVQ    groups+24(FP), CX
	MOVQ    units+32(FP), R10
	MOVQ    x+40(FP), DI
	MOVQ    xStride+48(FP), BX
	MOVQ    out+56(FP), R11
	LEAQ    (DI)(BX*2), R12
	ADDQ    BX, R12            // row 3
	LEAQ    (R12)(BX*2), R13
	ADDQ    BX, R13            // row 6
	VMOVUPS iota16<>(SB), Z16
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	VPXORD  Z2, Z2, Z2
	VPXORD  Z3, Z3, Z3
	VPXORD  Z4, Z4, Z4
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7

q4d8g:
	PREFETCHT0  4096(SI)
	SCALEBIAS
	VFMADD231PS Z16, Z17, Z18
	MOVQ        R10, DX

q4d8u:
	VPMOVZXBD (SI), Z8
	VPMOVZXBD 16(SI), Z10
	VPSRLD    $4, Z8, Z9
	VPSRLD    $4, Z10, Z11
	VPERMPS   Z18, Z8, Z8
	VPERMPS   Z18, Z9, Z9
	VPERMPS   Z18, Z10, Z10
	VPERMPS   Z18, Z11, Z11
	Q4DOT8ROW((DI), 64(DI), 128(DI), 192(DI), Z0)
	Q4DOT8ROW((DI)(BX*1), 64(DI)(BX*1), 128(DI)(BX*1), 192(DI)(BX*1), Z1)
	Q4DOT8ROW((DI)(BX*2), 64(DI)(BX*2), 128(DI)(BX*2), 192(DI)(BX*2), Z2)
	Q4DOT8ROW((R12), 64(R12), 128(R12), 192(R12), Z3)
	Q4DOT8ROW((DI)(BX*4), 64(DI)(BX*4), 128(DI)(BX*4), 192(DI)(BX*4), Z4)
	Q4DOT8ROW((R12)(BX*2), 64(R12)(BX*2), 128(R12)(BX*2), 192(R12)(BX*2), Z5)
	Q4DOT8ROW((R13), 64(R13), 128(R13), 192(R13), Z6)
	Q4DOT8ROW((R12)(BX*4), 64(R12)(BX*4), 128(R12)(BX*4), 192(R12)(BX*4), Z7)
	ADDQ      $32, SI
	ADDQ      $256, DI
	ADDQ      $256, R12
	ADDQ      $256, R13
	DECQ      DX
	JNZ       q4d8u
	ADDQ      $2, R8
	ADDQ      $2, R9
	DECQ      CX
	JNZ       q4d8g

	Q4DOT8REDUCE((R11))
	VZEROUPPER
	RET

DATA evenIdx<>+0(SB)/4, $0
DATA evenIdx<>+4(SB)/4, $2
DATA evenIdx<>+8(SB)/4, $4
DATA evenIdx<>+12(SB)/4, $6
DATA evenIdx<>+16(SB)/4, $8
DATA evenIdx<>+20(SB)/4, $10
DATA evenIdx<>+24(SB)/4, $12
DATA evenIdx<>+28(SB)/4, $14
DATA evenIdx<>+32(SB)/4, $16
DATA evenIdx<>+36(SB)/4, $18
DATA evenIdx<>+40(SB)/4, $20
DATA evenIdx<>+44(SB)/4, $22
DATA evenIdx<>+48(SB)/4, $24
DATA evenIdx<>+52(SB)/4, $26
DATA evenIdx<>+56(SB)/4, $28
DATA evenIdx<>+60(SB)/4, $30
GLOBL evenIdx<>(SB), RODATA|NOPTR, $64

// func interleave32AVX512(src, dst *float32, runs int)
// Each run of 32 floats becomes its 16 even elements, then its 16 odd ones (the order
// q4 activations take for these kernels): two VPERMT2PS over the run's two halves.
TEXT ·interleave32AVX512(SB), NOSPLIT, $0-24
	MOVQ    src+0(FP), SI
	MOVQ    dst+8(FP), DI
	MOVQ    runs+16(FP), CX
	VMOVUPS evenIdx<>(SB), Z4
	MOVL    $1, AX
	VPBROADCASTD AX, Z5
	VPADDD  Z5, Z4, Z5           // odd indexes

ilv:
	VMOVUPS    (SI), Z0
	VMOVUPS    64(SI), Z1
	VMOVAPS    Z0, Z2
	VPERMT2PS  Z1, Z4, Z2        // Z2 = evens of [Z0 Z1]
	VPERMT2PS  Z1, Z5, Z0        // Z0 = odds
	VMOVUPS    Z2, (DI)
	VMOVUPS    Z0, 64(DI)
	ADDQ       $128, SI
	ADDQ       $128, DI
	DECQ       CX
	JNZ        ilv
	VZEROUPPER
	RET

// ZERO16ACC clears the sixteen accumulators of the multi-row kernels below: Z0-Z14 and
// Z16 (Z15 is left alone).
#define ZERO16ACC \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z16, Z16, Z16

// Q4TABLE sets tab to the group's 16 values s·q + b (q = 0..15, iota their floats) from
// the bf16 scale at s and bias at b, as SCALEBIAS and q4Dot1AVX512 do (the same values
// and roundings): each bf16 broadcast from memory to every 16-bit lane (AVX512BW), then
// shifted into the high half of its 32-bit lane; tmp is clobbered.
#define Q4TABLE(s, b, iota, tmp, tab) \
	VPBROADCASTW s, tmp; \
	VPSLLD       $16, tmp, tmp; \
	VPBROADCASTW b, tab; \
	VPSLLD       $16, tab, tab; \
	VFMADD231PS  iota, tmp, tab

// Q4ROWUNIT decodes one row's unit of 64 codes (bytes c0 and c1.. through the table tab)
// and multiplies it with the unit's activations Z17..Z20 into the row's four
// accumulators, in q4Dot1AVX512's order.
#define Q4ROWUNIT(c0, c1, tab, a0, a1, a2, a3) \
	VPMOVZXBD   c0, Z26; \
	VPMOVZXBD   c1, Z28; \
	VPSRLD      $4, Z26, Z27; \
	VPSRLD      $4, Z28, Z29; \
	VPERMPS     tab, Z26, Z26; \
	VPERMPS     tab, Z27, Z27; \
	VPERMPS     tab, Z28, Z28; \
	VPERMPS     tab, Z29, Z29; \
	VFMADD231PS Z17, Z26, a0; \
	VFMADD231PS Z18, Z27, a1; \
	VFMADD231PS Z19, Z28, a2; \
	VFMADD231PS Z20, Z29, a3

// Q4ROWSUM reduces a row's four accumulators to its dot in the low lane of X(a0), as
// q4Dot1AVX512 ends (t, a register below 16, is clobbered), and stores it at out.
#define Q4ROWSUM(za0, za1, za2, za3, ya0, xa0, yt, xt, out) \
	VADDPS za1, za0, za0; \
	VADDPS za3, za2, za2; \
	VADDPS za2, za0, za0; \
	HSUM16(za0, ya0, xa0, yt, xt); \
	VMOVSS xa0, out

// func q4Dot1x4AVX512(codes *byte, rowBytes int, scales, biases *uint16, groups, units int, x *float32, out *[4]float32)
// Four consecutive q4 rows (codes rowBytes apart, scales and biases groups apart) against
// one activation row: q4Dot1AVX512 four times over, each row's sum in the same order (so
// the same bits), with each unit's activations loaded once for the four rows and one
// call's overhead for four rows. Rows 0-3 accumulate in Z0-Z3, Z4-Z7, Z8-Z11 and
// Z12-Z14 + Z16 (Z15 is left alone); their tables are Z21-Z24.
TEXT ·q4Dot1x4AVX512(SB), NOSPLIT, $0-64
	MOVQ    codes+0(FP), SI
	MOVQ    rowBytes+8(FP), DX
	MOVQ    scales+16(FP), R8
	MOVQ    biases+24(FP), R9
	MOVQ    groups+32(FP), CX
	MOVQ    units+40(FP), R10
	MOVQ    x+48(FP), DI
	LEAQ    (CX)(CX*1), BX     // a row's scales, in bytes
	LEAQ    (SI)(DX*2), R11
	ADDQ    DX, R11            // row 3's codes
	VMOVUPS iota16<>(SB), Z25
	ZERO16ACC

q4x4g:
	PREFETCHT0 8192(SI) // the weights stream from memory: ask ahead, each row
	PREFETCHT0 8192(SI)(DX*1)
	PREFETCHT0 8192(SI)(DX*2)
	PREFETCHT0 8192(R11)
	Q4TABLE((R8), (R9), Z25, Z30, Z21)
	Q4TABLE((R8)(BX*1), (R9)(BX*1), Z25, Z30, Z22)
	Q4TABLE((R8)(BX*2), (R9)(BX*2), Z25, Z30, Z23)
	LEAQ       (R8)(BX*2), R12
	LEAQ       (R9)(BX*2), R13
	Q4TABLE((R12)(BX*1), (R13)(BX*1), Z25, Z30, Z24) // row 3's
	MOVQ       R10, R12

q4x4u:
	VMOVUPS (DI), Z17
	VMOVUPS 64(DI), Z18
	VMOVUPS 128(DI), Z19
	VMOVUPS 192(DI), Z20
	Q4ROWUNIT((SI), 16(SI), Z21, Z0, Z1, Z2, Z3)
	Q4ROWUNIT((SI)(DX*1), 16(SI)(DX*1), Z22, Z4, Z5, Z6, Z7)
	Q4ROWUNIT((SI)(DX*2), 16(SI)(DX*2), Z23, Z8, Z9, Z10, Z11)
	Q4ROWUNIT((R11), 16(R11), Z24, Z12, Z13, Z14, Z16)
	ADDQ $32, SI
	ADDQ $32, R11
	ADDQ $256, DI
	DECQ R12
	JNZ  q4x4u
	ADDQ $2, R8
	ADDQ $2, R9
	DECQ CX
	JNZ  q4x4g

	MOVQ out+56(FP), R13
	Q4ROWSUM(Z0, Z1, Z2, Z3, Y0, X0, Y1, X1, (R13))
	Q4ROWSUM(Z4, Z5, Z6, Z7, Y4, X4, Y5, X5, 4(R13))
	Q4ROWSUM(Z8, Z9, Z10, Z11, Y8, X8, Y9, X9, 8(R13))
	Q4ROWSUM(Z12, Z13, Z14, Z16, Y12, X12, Y13, X13, 12(R13))
	VZEROUPPER
	RET

// Q4X2DECODE decodes a unit of 64 codes at c0 and c1.. through the table tab into the four
// runs r0..r3, in q4Dot8AVX512's order (low then high nibbles of bytes 0-15, then 16-31).
#define Q4X2DECODE(c0, c1, tab, r0, r1, r2, r3) \
	VPMOVZXBD c0, r0; \
	VPMOVZXBD c1, r2; \
	VPSRLD    $4, r0, r1; \
	VPSRLD    $4, r2, r3; \
	VPERMPS   tab, r0, r0; \
	VPERMPS   tab, r1, r1; \
	VPERMPS   tab, r2, r2; \
	VPERMPS   tab, r3, r3

// Q4X2ROW loads activation row p's unit (four runs at a0..a3) once and multiplies it with
// both weight rows' decoded runs, into accA and accB in Q4DOT8ROW's order.
#define Q4X2ROW(a0, a1, a2, a3, accA, accB) \
	VMOVUPS     a0, Z25; \
	VMOVUPS     a1, Z26; \
	VMOVUPS     a2, Z27; \
	VMOVUPS     a3, Z28; \
	VFMADD231PS Z25, Z17, accA; \
	VFMADD231PS Z26, Z18, accA; \
	VFMADD231PS Z27, Z19, accA; \
	VFMADD231PS Z28, Z20, accA; \
	VFMADD231PS Z25, Z21, accB; \
	VFMADD231PS Z26, Z22, accB; \
	VFMADD231PS Z27, Z23, accB; \
	VFMADD231PS Z28, Z24, accB


// func q4Dot8x2AVX512(codes *byte, rowBytes int, scales, biases *uint16, sbStride, groups, units int, x *float32, xStride int, out *[16]float32)
// Eight activation rows (xStride bytes apart) against two q4 weight rows (codes rowBytes
// apart, scales and biases sbStride bytes apart): q4Dot8AVX512 for each weight row, each
// sum in its order (so the same bits), but every activation vector loaded once for both
// rows. out[0:8] is the first weight row's, out[8:16] the second's. Row A accumulates in
// Z0-Z7, row B in Z8-Z14 and Z16 (Z15 is left alone); decoded runs Z17-Z20 and Z21-Z24,
// activations Z25-Z28, tables Z29 and Z30, iota Z31.
TEXT ·q4Dot8x2AVX512(SB), NOSPLIT, $0-80
	MOVQ    codes+0(FP), SI
	MOVQ    rowBytes+8(FP), DX
	MOVQ    scales+16(FP), R8
	MOVQ    biases+24(FP), R9
	MOVQ    sbStride+32(FP), R10
	MOVQ    groups+40(FP), CX
	MOVQ    x+56(FP), DI
	MOVQ    xStride+64(FP), BX
	LEAQ    (DI)(BX*2), R11
	ADDQ    BX, R11            // activation row 3
	LEAQ    (R11)(BX*2), R13
	ADDQ    BX, R13            // activation row 6
	VMOVUPS iota16<>(SB), Z31
	ZERO16ACC

q4x2g:
	PREFETCHT0   4096(SI)
	PREFETCHT0   4096(SI)(DX*1)
	Q4TABLE((R8), (R9), Z31, Z17, Z29)                 // row A's
	Q4TABLE((R8)(R10*1), (R9)(R10*1), Z31, Z17, Z30)   // row B's
	MOVQ         units+48(FP), R12

q4x2u:
	Q4X2DECODE((SI), 16(SI), Z29, Z17, Z18, Z19, Z20)
	Q4X2DECODE((SI)(DX*1), 16(SI)(DX*1), Z30, Z21, Z22, Z23, Z24)
	Q4X2ROW((DI), 64(DI), 128(DI), 192(DI), Z0, Z8)
	Q4X2ROW((DI)(BX*1), 64(DI)(BX*1), 128(DI)(BX*1), 192(DI)(BX*1), Z1, Z9)
	Q4X2ROW((DI)(BX*2), 64(DI)(BX*2), 128(DI)(BX*2), 192(DI)(BX*2), Z2, Z10)
	Q4X2ROW((R11), 64(R11), 128(R11), 192(R11), Z3, Z11)
	Q4X2ROW((DI)(BX*4), 64(DI)(BX*4), 128(DI)(BX*4), 192(DI)(BX*4), Z4, Z12)
	Q4X2ROW((R11)(BX*2), 64(R11)(BX*2), 128(R11)(BX*2), 192(R11)(BX*2), Z5, Z13)
	Q4X2ROW((R13), 64(R13), 128(R13), 192(R13), Z6, Z14)
	Q4X2ROW((R11)(BX*4), 64(R11)(BX*4), 128(R11)(BX*4), 192(R11)(BX*4), Z7, Z16)
	ADDQ $32, SI
	ADDQ $256, DI
	ADDQ $256, R11
	ADDQ $256, R13
	DECQ R12
	JNZ  q4x2u
	ADDQ $2, R8
	ADDQ $2, R9
	DECQ CX
	JNZ  q4x2g

	MOVQ      out+72(FP), AX
	Q4DOT8REDUCE((AX))
	VMOVAPS   Z8, Z0
	VMOVAPS   Z9, Z1
	VMOVAPS   Z10, Z2
	VMOVAPS   Z11, Z3
	VMOVAPS   Z12, Z4
	VMOVAPS   Z13, Z5
	VMOVAPS   Z14, Z6
	VMOVAPS   Z16, Z7
	Q4DOT8REDUCE(32(AX))
	VZEROUPPER
	RET
