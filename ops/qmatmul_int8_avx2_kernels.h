// The int8 q4 kernels on 256-bit registers (a tile of weight rows against eight
// activation rows, INT8_AVX2_TILE, and weight rows against one, INT8_AVX2_DOT1), shared by
// the AVX2 kernels (qmatmul_int8_avx2_amd64.s) and the AVX-VNNI ones
// (qmatmul_int8_avxvnni_amd64.s), which differ only in how ROW and DOT1, defined before
// this is included, multiply a half block's codes with the activations. Included once per
// file: its tables are file-local (<>).

// The VPERMD indices that spread eight float32 group values (natural order) over the
// lanes of each half: lane L of the low half holds group order[L/2] (0 0 4 4 1 1 5 5),
// of the high half order[4+L/2] (2 2 6 6 3 3 7 7).
DATA spreadLo<>+0(SB)/4, $0
DATA spreadLo<>+4(SB)/4, $0
DATA spreadLo<>+8(SB)/4, $4
DATA spreadLo<>+12(SB)/4, $4
DATA spreadLo<>+16(SB)/4, $1
DATA spreadLo<>+20(SB)/4, $1
DATA spreadLo<>+24(SB)/4, $5
DATA spreadLo<>+28(SB)/4, $5
GLOBL spreadLo<>(SB), RODATA|NOPTR, $32

DATA spreadHi<>+0(SB)/4, $2
DATA spreadHi<>+4(SB)/4, $2
DATA spreadHi<>+8(SB)/4, $6
DATA spreadHi<>+12(SB)/4, $6
DATA spreadHi<>+16(SB)/4, $3
DATA spreadHi<>+20(SB)/4, $3
DATA spreadHi<>+24(SB)/4, $7
DATA spreadHi<>+28(SB)/4, $7
GLOBL spreadHi<>(SB), RODATA|NOPTR, $32

// HALFCODES transposes groups ga gb gc gd (their code rows' 32-byte addresses) into the
// nibble vectors Y0-Y7 (Y2k: low nibbles of T_k, Y2k+1: high); Y8 is scratch.
#define HALFCODES(ga, gb, gc, gd) \
	VMOVDQU     ga, Y4; \
	VMOVDQU     gb, Y5; \
	VMOVDQU     gc, Y6; \
	VMOVDQU     gd, Y7; \
	VPUNPCKLQDQ Y5, Y4, Y0; \
	VPUNPCKHQDQ Y5, Y4, Y1; \
	VPUNPCKLQDQ Y7, Y6, Y2; \
	VPUNPCKHQDQ Y7, Y6, Y3; \
	VPERM2I128  $0x20, Y2, Y0, Y4; \
	VPERM2I128  $0x20, Y3, Y1, Y5; \
	VPERM2I128  $0x31, Y2, Y0, Y6; \
	VPERM2I128  $0x31, Y3, Y1, Y7; \
	VPSRLW      $4, Y4, Y1; \
	VPAND       Y14, Y4, Y0; \
	VPAND       Y14, Y1, Y1; \
	VPSRLW      $4, Y5, Y3; \
	VPAND       Y14, Y5, Y2; \
	VPAND       Y14, Y3, Y3; \
	VPSRLW      $4, Y6, Y5; \
	VPAND       Y14, Y6, Y4; \
	VPAND       Y14, Y5, Y5; \
	VPSRLW      $4, Y7, Y8; \
	VPAND       Y14, Y7, Y6; \
	VPAND       Y14, Y8, Y7

// HALF is HALFCODES, then spreads the block's scales and biases over the half's lanes
// with the VPERMD index idx.
#define HALF(ga, gb, gc, gd, idx) \
	HALFCODES(ga, gb, gc, gd); \
	VMOVDQU     idx, Y12; \
	VPMOVZXWD   (R8), Y9; \
	VPSLLD      $16, Y9, Y9; \
	VPERMD      Y9, Y12, Y11; \
	VPMOVZXWD   (R9), Y9; \
	VPSLLD      $16, Y9, Y9; \
	VPERMD      Y9, Y12, Y13

// func INT8_AVX2_TILE(codes *byte, codeStride int, scales, biases *uint16, groupStride, blocks, rows int, acts *byte, rowStride int, out *[8]float32)
//
// out[r][p] += the dot of activation row p with weight row r for rows weight rows
// codeStride bytes apart (their scales and biases groupStride bytes apart), as the VNNI
// kernel takes them: a tile in one call.
TEXT INT8_AVX2_TILE(SB), NOSPLIT, $256-80
	MOVQ rowStride+64(FP), BX
	MOVQ out+72(FP), DX
	MOVL         $0x0f0f0f0f, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $0x00010001, AX
	MOVQ         AX, X10
	VPBROADCASTD X10, Y10

q4i8avx2row:
	INT8_WEIGHT_ROW_START
	VPXOR        Y0, Y0, Y0
	VMOVUPS      Y0, 0(SP)
	VMOVUPS      Y0, 32(SP)
	VMOVUPS      Y0, 64(SP)
	VMOVUPS      Y0, 96(SP)
	VMOVUPS      Y0, 128(SP)
	VMOVUPS      Y0, 160(SP)
	VMOVUPS      Y0, 192(SP)
	VMOVUPS      Y0, 224(SP)

q4i8avx2block:
	// Groups 0 4 1 5: the low halves of the activation vectors.
	HALF((SI), 128(SI), 32(SI), 160(SI), spreadLo<>(SB))
	ROW(0(DI), 64(DI), 128(DI), 192(DI), 256(DI), 320(DI), 384(DI), 448(DI), 512(DI), 576(DI), 0(SP))
	ROW(0(DI)(BX*1), 64(DI)(BX*1), 128(DI)(BX*1), 192(DI)(BX*1), 256(DI)(BX*1), 320(DI)(BX*1), 384(DI)(BX*1), 448(DI)(BX*1), 512(DI)(BX*1), 576(DI)(BX*1), 32(SP))
	ROW(0(DI)(BX*2), 64(DI)(BX*2), 128(DI)(BX*2), 192(DI)(BX*2), 256(DI)(BX*2), 320(DI)(BX*2), 384(DI)(BX*2), 448(DI)(BX*2), 512(DI)(BX*2), 576(DI)(BX*2), 64(SP))
	ROW(0(R12), 64(R12), 128(R12), 192(R12), 256(R12), 320(R12), 384(R12), 448(R12), 512(R12), 576(R12), 96(SP))
	ROW(0(R11), 64(R11), 128(R11), 192(R11), 256(R11), 320(R11), 384(R11), 448(R11), 512(R11), 576(R11), 128(SP))
	ROW(0(R11)(BX*1), 64(R11)(BX*1), 128(R11)(BX*1), 192(R11)(BX*1), 256(R11)(BX*1), 320(R11)(BX*1), 384(R11)(BX*1), 448(R11)(BX*1), 512(R11)(BX*1), 576(R11)(BX*1), 160(SP))
	ROW(0(R11)(BX*2), 64(R11)(BX*2), 128(R11)(BX*2), 192(R11)(BX*2), 256(R11)(BX*2), 320(R11)(BX*2), 384(R11)(BX*2), 448(R11)(BX*2), 512(R11)(BX*2), 576(R11)(BX*2), 192(SP))
	ROW(0(R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), 224(SP))

	// Groups 2 6 3 7: the high halves.
	HALF(64(SI), 192(SI), 96(SI), 224(SI), spreadHi<>(SB))
	ROW(32(DI), 96(DI), 160(DI), 224(DI), 288(DI), 352(DI), 416(DI), 480(DI), 544(DI), 608(DI), 0(SP))
	ROW(32(DI)(BX*1), 96(DI)(BX*1), 160(DI)(BX*1), 224(DI)(BX*1), 288(DI)(BX*1), 352(DI)(BX*1), 416(DI)(BX*1), 480(DI)(BX*1), 544(DI)(BX*1), 608(DI)(BX*1), 32(SP))
	ROW(32(DI)(BX*2), 96(DI)(BX*2), 160(DI)(BX*2), 224(DI)(BX*2), 288(DI)(BX*2), 352(DI)(BX*2), 416(DI)(BX*2), 480(DI)(BX*2), 544(DI)(BX*2), 608(DI)(BX*2), 64(SP))
	ROW(32(R12), 96(R12), 160(R12), 224(R12), 288(R12), 352(R12), 416(R12), 480(R12), 544(R12), 608(R12), 96(SP))
	ROW(32(R11), 96(R11), 160(R11), 224(R11), 288(R11), 352(R11), 416(R11), 480(R11), 544(R11), 608(R11), 128(SP))
	ROW(32(R11)(BX*1), 96(R11)(BX*1), 160(R11)(BX*1), 224(R11)(BX*1), 288(R11)(BX*1), 352(R11)(BX*1), 416(R11)(BX*1), 480(R11)(BX*1), 544(R11)(BX*1), 608(R11)(BX*1), 160(SP))
	ROW(32(R11)(BX*2), 96(R11)(BX*2), 160(R11)(BX*2), 224(R11)(BX*2), 288(R11)(BX*2), 352(R11)(BX*2), 416(R11)(BX*2), 480(R11)(BX*2), 544(R11)(BX*2), 608(R11)(BX*2), 192(SP))
	ROW(32(R13), 96(R13), 160(R13), 224(R13), 288(R13), 352(R13), 416(R13), 480(R13), 544(R13), 608(R13), 224(SP))

	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $640, DI
	ADDQ $640, R11
	ADDQ $640, R12
	ADDQ $640, R13
	DECQ CX
	JNZ  q4i8avx2block

	// Lane sums of the eight accumulators, added to out[0..7].
	VMOVUPS      0(SP), Y0
	VMOVUPS      32(SP), Y1
	VMOVUPS      64(SP), Y2
	VMOVUPS      96(SP), Y3
	VMOVUPS      128(SP), Y4
	VMOVUPS      160(SP), Y5
	VMOVUPS      192(SP), Y6
	VMOVUPS      224(SP), Y7
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y5, Y4, Y4
	VHADDPS      Y7, Y6, Y6
	VHADDPS      Y2, Y0, Y0
	VHADDPS      Y6, Y4, Y4
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VADDPS       (DX), X0, X0
	VADDPS       16(DX), X4, X4
	VMOVUPS      X0, (DX)
	VMOVUPS      X4, 16(DX)

	// The next weight row (its pointers kept in the argument slots).
	INT8_NEXT_WEIGHT_ROW
	DECQ rows+48(FP)
	JNZ  q4i8avx2row

	VZEROUPPER
	RET

// dot1Order<> is the VPERMD index that puts eight float32 group values (natural order)
// in the order of the one-row kernel's group sums: 0 4 2 6 1 5 3 7.
DATA dot1Order<>+0(SB)/4, $0
DATA dot1Order<>+4(SB)/4, $4
DATA dot1Order<>+8(SB)/4, $2
DATA dot1Order<>+12(SB)/4, $6
DATA dot1Order<>+16(SB)/4, $1
DATA dot1Order<>+20(SB)/4, $5
DATA dot1Order<>+24(SB)/4, $3
DATA dot1Order<>+28(SB)/4, $7
GLOBL dot1Order<>(SB), RODATA|NOPTR, $32

// func INT8_AVX2_DOT1(codes *byte, scales, biases *uint16, blocks, rows int, acts *byte, out *float32)
//
// out[r] = the dot of one activation row (acts, blocks blocks in the int8 layout) with
// each of rows consecutive weight rows of blocks blocks: q4Int8Dot1VNNI's work for
// machines without AVX-512 VNNI. Per block the two halves are transposed and multiplied
// as in q4Int8Dot8AVX2Asm, for one row, so the accumulator stays in a register (Y13).
// The halves' int32 sums are then folded pairwise (VPHADDD: lanes 2j and 2j+1 hold the
// same group), which leaves one sum per group in the order 0 4 2 6 1 5 3 7; the
// activation scales and halved sums come out of their tables in that order with one
// VSHUFPS and one VHADDPS, the weights' scales and biases with one VPERMD each, so one
// conversion and two FMAs cover the block.
TEXT INT8_AVX2_DOT1(SB), NOSPLIT, $0-56
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ rows+32(FP), BX
	MOVQ out+48(FP), DX

	MOVL         $0x0f0f0f0f, AX
	MOVQ         AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $0x00010001, AX
	MOVQ         AX, X10
	VPBROADCASTD X10, Y10

q4i8avx2d1row:
	MOVQ  blocks+24(FP), CX
	MOVQ  acts+40(FP), DI
	VPXOR Y13, Y13, Y13

q4i8avx2d1block:
	// Eight blocks ahead, as q4Int8Dot1VNNI.
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)

	HALFCODES((SI), 128(SI), 32(SI), 160(SI))
	DOT1(0(DI), 64(DI), 128(DI), 192(DI), 256(DI), 320(DI), 384(DI), 448(DI), Y11)
	HALFCODES(64(SI), 192(SI), 96(SI), 224(SI))
	DOT1(32(DI), 96(DI), 160(DI), 224(DI), 288(DI), 352(DI), 416(DI), 480(DI), Y12)

	VPHADDD      Y12, Y11, Y0 // groups 0 4 2 6 | 1 5 3 7
	VCVTDQ2PS    Y0, Y0
	VMOVUPS      512(DI), Y1
	VSHUFPS      $0x88, 544(DI), Y1, Y1 // sx of table lanes 0 2 8 10 | 4 6 12 14
	VMULPS       Y1, Y0, Y0
	VMOVUPS      576(DI), Y2
	VHADDPS      608(DI), Y2, Y2 // sx·Σxq: the two halved lanes of each group added
	VMOVDQU      dot1Order<>(SB), Y4
	VPMOVZXWD    (R8), Y3
	VPSLLD       $16, Y3, Y3
	VPERMD       Y3, Y4, Y3
	VPMOVZXWD    (R9), Y5
	VPSLLD       $16, Y5, Y5
	VPERMD       Y5, Y4, Y5
	VFMADD231PS  Y3, Y0, Y13
	VFMADD231PS  Y5, Y2, Y13

	ADDQ $256, SI
	ADDQ $16, R8
	ADDQ $16, R9
	ADDQ $640, DI
	DECQ CX
	JNZ  q4i8avx2d1block

	VEXTRACTF128 $1, Y13, X0
	VADDPS       X13, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (DX)
	ADDQ         $4, DX
	DECQ         BX
	JNZ          q4i8avx2d1row

	VZEROUPPER
	RET
