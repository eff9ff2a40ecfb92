// AVX-512 VNNI kernel of the int8-activation q4 matmul (see qmatmul_int8.go for the
// activation layout and why the weight qwords are transposed). Per block of 8 groups the
// 256 code bytes of one weight row are shuffled in registers so that every 32-bit lane
// holds codes of one group only and the same lane of all four vectors the same group
// (VSHUFI64X2, then VPUNPCK[LH]QDQ), split into low and high nibbles, and met by eight
// activation rows with VPDPBUSD (u8 codes x s8 activations, exact int32 sums); each row's
// sums are then converted once per block and scaled by the activation and weight scales
// of their lanes' groups. Z0-Z7 accumulate the eight rows, Z16-Z23 hold the unpacked
// codes, Z29/Z30 the block's weight scales and biases spread over the lanes, Z24 the
// nibble mask, Z31 the spreading index. X15 and R14 are left alone (ABIInternal's zero
// and g registers).

#include "textflag.h"
#include "qmatmul_int8_amd64.h"

// spread16<> is the VPERMW index that puts bf16 value order[L/2] of a broadcast row of
// eight into the high half of dword lane L (order = 0 4 1 5 2 6 3 7: the group each qword
// lane holds after the transpose); the low halves are zeroed by the K1 mask.
DATA spread16<>+0(SB)/4, $0x00000000
DATA spread16<>+4(SB)/4, $0x00000000
DATA spread16<>+8(SB)/4, $0x00040000
DATA spread16<>+12(SB)/4, $0x00040000
DATA spread16<>+16(SB)/4, $0x00010000
DATA spread16<>+20(SB)/4, $0x00010000
DATA spread16<>+24(SB)/4, $0x00050000
DATA spread16<>+28(SB)/4, $0x00050000
DATA spread16<>+32(SB)/4, $0x00020000
DATA spread16<>+36(SB)/4, $0x00020000
DATA spread16<>+40(SB)/4, $0x00060000
DATA spread16<>+44(SB)/4, $0x00060000
DATA spread16<>+48(SB)/4, $0x00030000
DATA spread16<>+52(SB)/4, $0x00030000
DATA spread16<>+56(SB)/4, $0x00070000
DATA spread16<>+60(SB)/4, $0x00070000
GLOBL spread16<>(SB), RODATA|NOPTR, $64

// ROW meets the unpacked codes with one activation row's block (a0..a9: its eight code
// vectors, its activation scales and its halved group sums) and adds to acc.
#define ROW(a0, a1, a2, a3, a4, a5, a6, a7, sx, xs, tmp, acc) \
	VPXORD      tmp, tmp, tmp; \
	VPDPBUSD    a0, Z16, tmp; \
	VPDPBUSD    a1, Z17, tmp; \
	VPDPBUSD    a2, Z18, tmp; \
	VPDPBUSD    a3, Z19, tmp; \
	VPDPBUSD    a4, Z20, tmp; \
	VPDPBUSD    a5, Z21, tmp; \
	VPDPBUSD    a6, Z22, tmp; \
	VPDPBUSD    a7, Z23, tmp; \
	VCVTDQ2PS   tmp, tmp; \
	VMULPS      sx, tmp, tmp; \
	VFMADD231PS Z29, tmp, acc; \
	VFMADD231PS xs, Z30, acc

// func q4Int8Dot8VNNI(codes *byte, codeStride int, scales, biases *uint16, groupStride, blocks, rows int, acts *byte, rowStride int, out *[8]float32, prefetch int)
//
// out[r][p] += the dot of activation row p (eight rows rowStride bytes apart, blocks
// blocks) with weight row r, for rows weight rows codeStride bytes apart (their scales
// and biases groupStride bytes apart): a tile in one call, the constants set up once and
// no Go call between rows, which at one block a row (the experts' down projection) made
// the kernel 1.6x slower (BenchmarkInt8TileKernel).
//
// prefetch != 0 prefetches, per block, the codes 2 KiB ahead and the scales and biases
// 128 bytes ahead (the same eight blocks ahead: 16 bytes of each a block): the routed
// experts meet each weight tile in one or two passes of eight activation rows, so the
// first pass streams its weights from memory, which the hardware prefetchers alone left
// the kernel waiting on (BenchmarkPrefillChunk: expert_down 1.14x, expert_swiglu 1.07x;
// in the full model the experts' kernel time fell by a third; cpu/README.md, session 11).
// Dense projections, whose tiles stay in L2 for 64 passes, neither gain nor lose.
TEXT ·q4Int8Dot8VNNI(SB), NOSPLIT, $0-88
	MOVQ         rowStride+64(FP), BX
	MOVQ         prefetch+80(FP), R10
	MOVQ         out+72(FP), DX
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z24
	VMOVDQU64    spread16<>(SB), Z31
	MOVL         $0xaaaaaaaa, AX
	KMOVD        AX, K1

q4i8row:
	INT8_WEIGHT_ROW_START
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

q4i8block:
	TESTQ      R10, R10
	JZ         q4i8loads
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	PREFETCHT0 128(R8)
	PREFETCHT0 128(R9)

q4i8loads:
	// W0..W3 = groups 0-1, 2-3, 4-5, 6-7 (four qwords each). P0/P1: qwords 0-1 / 2-3 of
	// groups 0-3 (128-bit chunks), Q0/Q1 the same of groups 4-7; interleaving P and Q by
	// qword gives T_k = qword k of groups 0 4 1 5 2 6 3 7.
	VMOVDQU64   (SI), Z10
	VMOVDQU64   128(SI), Z11
	VSHUFI64X2  $0x88, 64(SI), Z10, Z12
	VSHUFI64X2  $0xdd, 64(SI), Z10, Z13
	VSHUFI64X2  $0x88, 192(SI), Z11, Z14
	VSHUFI64X2  $0xdd, 192(SI), Z11, Z9
	VPUNPCKLQDQ Z14, Z12, Z16
	VPUNPCKHQDQ Z14, Z12, Z18
	VPUNPCKLQDQ Z9, Z13, Z20
	VPUNPCKHQDQ Z9, Z13, Z22
	VPSRLW      $4, Z16, Z17
	VPSRLW      $4, Z18, Z19
	VPSRLW      $4, Z20, Z21
	VPSRLW      $4, Z22, Z23
	VPANDD      Z24, Z16, Z16
	VPANDD      Z24, Z17, Z17
	VPANDD      Z24, Z18, Z18
	VPANDD      Z24, Z19, Z19
	VPANDD      Z24, Z20, Z20
	VPANDD      Z24, Z21, Z21
	VPANDD      Z24, Z22, Z22
	VPANDD      Z24, Z23, Z23

	// The block's eight scales and biases (bf16) become float32 lanes in the groups'
	// lane order.
	VBROADCASTI32X4 (R8), Z29
	VPERMW.Z        Z29, Z31, K1, Z29
	VBROADCASTI32X4 (R9), Z30
	VPERMW.Z        Z30, Z31, K1, Z30

	ROW((DI), 64(DI), 128(DI), 192(DI), 256(DI), 320(DI), 384(DI), 448(DI), 512(DI), 576(DI), Z8, Z0)
	ROW((DI)(BX*1), 64(DI)(BX*1), 128(DI)(BX*1), 192(DI)(BX*1), 256(DI)(BX*1), 320(DI)(BX*1), 384(DI)(BX*1), 448(DI)(BX*1), 512(DI)(BX*1), 576(DI)(BX*1), Z9, Z1)
	ROW((DI)(BX*2), 64(DI)(BX*2), 128(DI)(BX*2), 192(DI)(BX*2), 256(DI)(BX*2), 320(DI)(BX*2), 384(DI)(BX*2), 448(DI)(BX*2), 512(DI)(BX*2), 576(DI)(BX*2), Z8, Z2)
	ROW((R12), 64(R12), 128(R12), 192(R12), 256(R12), 320(R12), 384(R12), 448(R12), 512(R12), 576(R12), Z9, Z3)
	ROW((R11), 64(R11), 128(R11), 192(R11), 256(R11), 320(R11), 384(R11), 448(R11), 512(R11), 576(R11), Z8, Z4)
	ROW((R11)(BX*1), 64(R11)(BX*1), 128(R11)(BX*1), 192(R11)(BX*1), 256(R11)(BX*1), 320(R11)(BX*1), 384(R11)(BX*1), 448(R11)(BX*1), 512(R11)(BX*1), 576(R11)(BX*1), Z9, Z5)
	ROW((R11)(BX*2), 64(R11)(BX*2), 128(R11)(BX*2), 192(R11)(BX*2), 256(R11)(BX*2), 320(R11)(BX*2), 384(R11)(BX*2), 448(R11)(BX*2), 512(R11)(BX*2), 576(R11)(BX*2), Z8, Z6)
	ROW((R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), Z9, Z7)

	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $640, DI
	ADDQ $640, R11
	ADDQ $640, R12
	ADDQ $640, R13
	DECQ CX
	JNZ  q4i8block

	// Lane sums of the eight accumulators, added to out[0..7].
	VEXTRACTF64X4 $1, Z0, Y8
	VADDPS        Y8, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y8
	VADDPS        Y8, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y8
	VADDPS        Y8, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y8
	VADDPS        Y8, Y3, Y3
	VEXTRACTF64X4 $1, Z4, Y8
	VADDPS        Y8, Y4, Y4
	VEXTRACTF64X4 $1, Z5, Y8
	VADDPS        Y8, Y5, Y5
	VEXTRACTF64X4 $1, Z6, Y8
	VADDPS        Y8, Y6, Y6
	VEXTRACTF64X4 $1, Z7, Y8
	VADDPS        Y8, Y7, Y7
	VHADDPS       Y1, Y0, Y0
	VHADDPS       Y3, Y2, Y2
	VHADDPS       Y5, Y4, Y4
	VHADDPS       Y7, Y6, Y6
	VHADDPS       Y2, Y0, Y0
	VHADDPS       Y6, Y4, Y4
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VEXTRACTF128  $1, Y4, X5
	VADDPS        X5, X4, X4
	VADDPS        (DX), X0, X0
	VADDPS        16(DX), X4, X4
	VMOVUPS       X0, (DX)
	VMOVUPS       X4, 16(DX)

	// The next weight row (its pointers kept in the argument slots).
	INT8_NEXT_WEIGHT_ROW
	MOVQ prefetch+80(FP), R10
	DECQ rows+48(FP)
	JNZ  q4i8row

	VZEROUPPER
	RET

// HSUM1 reduces Z0 to its lane sum in the low lane of X0 (Y1/X1 scratch).
#define HSUM1 \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS        Y1, Y0, Y0; \
	VEXTRACTF128  $1, Y0, X1; \
	VADDPS        X1, X0, X0; \
	VHADDPS       X0, X0, X0; \
	VHADDPS       X0, X0, X0

// ROW1 is ROW for the one-row kernel: the low nibbles' products sum in Z8, the high
// nibbles' in Z9 (two shorter VPDPBUSD chains: a single row has no other row's work to
// overlap them with). The high nibbles are masked in place (0xf0), not shifted down, so
// Z9 holds 16 times their sum, each product a multiple of 16 and the largest
// 4·240·127 per lane and instruction: one exact arithmetic shift per block undoes it.
#define ROW1(a0, a1, a2, a3, a4, a5, a6, a7, sx, xs, acc) \
	VPXORD      Z8, Z8, Z8; \
	VPXORD      Z9, Z9, Z9; \
	VPDPBUSD    a0, Z16, Z8; \
	VPDPBUSD    a1, Z17, Z9; \
	VPDPBUSD    a2, Z18, Z8; \
	VPDPBUSD    a3, Z19, Z9; \
	VPDPBUSD    a4, Z20, Z8; \
	VPDPBUSD    a5, Z21, Z9; \
	VPDPBUSD    a6, Z22, Z8; \
	VPDPBUSD    a7, Z23, Z9; \
	VPSRAD      $4, Z9, Z9; \
	VPADDD      Z9, Z8, Z8; \
	VCVTDQ2PS   Z8, Z8; \
	VMULPS      sx, Z8, Z8; \
	VFMADD231PS Z29, Z8, acc; \
	VFMADD231PS xs, Z30, acc

// func q4Int8Dot1VNNI(codes *byte, scales, biases *uint16, blocks, rows int, acts *byte, out *float32, ahead int)
//
// out[r] = the dot of one activation row (acts, blocks blocks in the int8 layout) with
// each of rows consecutive weight rows of blocks blocks: decode's matrix-vector product.
// The weight bytes are transposed as in q4Int8Dot8VNNI; with one activation row the
// transpose is paid per weight byte, which the loads from memory still outlast. Each
// block asks for the weight bytes ahead bytes past it (int8RowAhead: how far depends on
// the machine's memory).
TEXT ·q4Int8Dot1VNNI(SB), NOSPLIT, $0-64
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ rows+32(FP), BX
	MOVQ out+48(FP), DX
	MOVQ ahead+56(FP), R11

	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z24
	MOVL         $0xf0f0f0f0, AX
	VPBROADCASTD AX, Z25
	VMOVDQU64    spread16<>(SB), Z31
	MOVL         $0xaaaaaaaa, AX
	KMOVD        AX, K1

q4i8d1row:
	MOVQ   blocks+24(FP), CX
	MOVQ   acts+40(FP), DI
	VPXORD Z0, Z0, Z0

q4i8d1block:
	PREFETCHT0  (SI)(R11*1)
	PREFETCHT0  64(SI)(R11*1)
	PREFETCHT0  128(SI)(R11*1)
	PREFETCHT0  192(SI)(R11*1)
	VMOVDQU64   (SI), Z10
	VMOVDQU64   128(SI), Z11
	VSHUFI64X2  $0x88, 64(SI), Z10, Z12
	VSHUFI64X2  $0xdd, 64(SI), Z10, Z13
	VSHUFI64X2  $0x88, 192(SI), Z11, Z14
	VSHUFI64X2  $0xdd, 192(SI), Z11, Z7
	VPUNPCKLQDQ Z14, Z12, Z16
	VPUNPCKHQDQ Z14, Z12, Z18
	VPUNPCKLQDQ Z7, Z13, Z20
	VPUNPCKHQDQ Z7, Z13, Z22
	VPANDD      Z25, Z16, Z17 // high nibbles in place: 16 times the code
	VPANDD      Z25, Z18, Z19
	VPANDD      Z25, Z20, Z21
	VPANDD      Z25, Z22, Z23
	VPANDD      Z24, Z16, Z16
	VPANDD      Z24, Z18, Z18
	VPANDD      Z24, Z20, Z20
	VPANDD      Z24, Z22, Z22

	VBROADCASTI32X4 (R8), Z29
	VPERMW.Z        Z29, Z31, K1, Z29
	VBROADCASTI32X4 (R9), Z30
	VPERMW.Z        Z30, Z31, K1, Z30

	ROW1((DI), 64(DI), 128(DI), 192(DI), 256(DI), 320(DI), 384(DI), 448(DI), 512(DI), 576(DI), Z0)

	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $640, DI
	DECQ CX
	JNZ  q4i8d1block

	HSUM1
	MOVSS X0, (DX)
	ADDQ  $4, DX
	DECQ  BX
	JNZ   q4i8d1row

	VZEROUPPER
	RET

// ·int8EvenOdd16 is the VPSHUFB index that puts the 16 bytes of a quantized run of 16
// elements as its 8 even elements, then its 8 odd ones; ·int8QuantConst the quantizers'
// constants. Both quantizers use them (this file's and qmatmul_int8_avx2_amd64.s's).
DATA ·int8EvenOdd16+0(SB)/8, $0x0e0c0a0806040200
DATA ·int8EvenOdd16+8(SB)/8, $0x0f0d0b0907050301
GLOBL ·int8EvenOdd16(SB), RODATA|NOPTR, $16

DATA ·int8QuantConst+0(SB)/4, $0x7fffffff // |x| mask
DATA ·int8QuantConst+4(SB)/4, $0x42fe0000 // 127
DATA ·int8QuantConst+8(SB)/4, $0x3f000000 // 1/2
GLOBL ·int8QuantConst(SB), RODATA|NOPTR, $12

// QRUN quantizes the 16 elements of run k (in zk, times inv in Z20) and stores their even
// and odd bytes at vectors 2k and 2k+1 of the block, lane j (DI points at byte 8j of
// vector 0); their int32 values are added to Z21.
#define QRUN(zk, off) \
	VMULPS    Z20, zk, zk; \
	VCVTPS2DQ zk, zk; \
	VPADDD    zk, Z21, Z21; \
	VPMOVSDB  zk, X4; \
	VPSHUFB   X22, X4, X4; \
	MOVQ      X4, off(DI); \
	VPEXTRQ   $1, X4, off+64(DI)

// func quantizeGroupAVX512(x *float32, block *byte, lane int)
//
// quantizeInt8Row for one group of 64: rounds x·(127/max|x|) to int8, halves to even (the
// conversion's default rounding, as roundInt8), writes the codes into lane `lane` of the
// block's eight vectors and the group's scale and halved sum into the block's two float
// tables; a zero group is left as it is (the caller clears the row first). The float
// steps are the Go loop's, in its order, so the bytes and floats are the same.
TEXT ·quantizeGroupAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ block+8(FP), DX
	MOVQ lane+16(FP), BX

	VMOVUPS      (SI), Z0
	VMOVUPS      64(SI), Z1
	VMOVUPS      128(SI), Z2
	VMOVUPS      192(SI), Z3
	VBROADCASTSS ·int8QuantConst+0(SB), Z5
	VANDPS       Z5, Z0, Z6
	VANDPS       Z5, Z1, Z7
	VANDPS       Z5, Z2, Z8
	VANDPS       Z5, Z3, Z9
	VMAXPS       Z7, Z6, Z6
	VMAXPS       Z9, Z8, Z8
	VMAXPS       Z8, Z6, Z6
	VEXTRACTF64X4 $1, Z6, Y7
	VMAXPS       Y7, Y6, Y6
	VEXTRACTF128 $1, Y6, X7
	VMAXPS       X7, X6, X6
	VPERMILPS    $0x4e, X6, X7
	VMAXPS       X7, X6, X6
	VPERMILPS    $0xb1, X6, X7
	VMAXPS       X7, X6, X6 // amax in every lane of X6
	VXORPS       X7, X7, X7
	VUCOMISS     X7, X6
	JEQ          zero

	MOVSS        ·int8QuantConst+4(SB), X8
	VDIVSS       X6, X8, X9   // inv = 127 / amax
	VBROADCASTSS X9, Z20
	VDIVSS       X8, X6, X10  // sx = amax / 127
	VPXORD       Z21, Z21, Z21
	VMOVDQU64    ·int8EvenOdd16(SB), X22
	LEAQ         (DX)(BX*8), DI
	QRUN(Z0, 0)
	QRUN(Z1, 128)
	QRUN(Z2, 256)
	QRUN(Z3, 384)

	// qsum: the lane sum of Z21; the tables take sx and float32(qsum)·sx/2 twice each.
	VEXTRACTI64X4 $1, Z21, Y11
	VPADDD        Y11, Y21, Y11
	VEXTRACTI128  $1, Y11, X12
	VPADDD        X12, X11, X11
	VPSHUFD       $0x4e, X11, X12
	VPADDD        X12, X11, X11
	VPSHUFD       $0xb1, X11, X12
	VPADDD        X12, X11, X11
	VCVTDQ2PS     X11, X11
	VMULSS        X10, X11, X11
	VMULSS        ·int8QuantConst+8(SB), X11, X11
	SHLQ          $3, BX // lane j: floats 2j and 2j+1 of each table, 8 bytes
	MOVSS         X10, 512(DX)(BX*1)
	MOVSS         X10, 516(DX)(BX*1)
	MOVSS         X11, 576(DX)(BX*1)
	MOVSS         X11, 580(DX)(BX*1)

zero:
	VZEROUPPER
	RET
