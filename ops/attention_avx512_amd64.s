// AVX-512 kernels of the tiled attention's two dot-product loops (attention_tiled.go,
// attention_amd64.go), over the same packed layouts as the AVX2 ones: query and output
// rows in quads, chunk c (8 floats) of row r of a quad at byte 128c + 32r, so one zmm
// load at 128c (or 128c + 64) holds chunk c of rows 0 and 1 (or 2 and 3); scores
// key-major, s[j*nq + i]. In the scores a chunk of a key row is broadcast to both halves
// of a zmm (VBROADCASTF64X4), so each FMA does two rows' eight lanes; in the value sums
// each register holds one output row's 16 dims and a key's probability of the row is
// broadcast (below). Twice the AVX2 kernels' work per instruction on a machine with
// full-width 512-bit FMA units (Zen 5, Xeon). Both take 8 rows (two quads) at a time; nq
// is a multiple of 8. Z15 and R14 are left alone (ABIInternal's zero and g registers); BP
// is not used, R15 only after the kernels' last global load (the value sums' distance to
// the rows they fetch ahead).

#include "textflag.h"

// scorePerm puts the reduced scores [r0 r2 r4 r6 r1 r3 r5 r7] of two keys in row order.
DATA scorePerm<>+0(SB)/4, $0
DATA scorePerm<>+4(SB)/4, $4
DATA scorePerm<>+8(SB)/4, $1
DATA scorePerm<>+12(SB)/4, $5
DATA scorePerm<>+16(SB)/4, $2
DATA scorePerm<>+20(SB)/4, $6
DATA scorePerm<>+24(SB)/4, $3
DATA scorePerm<>+28(SB)/4, $7
DATA scorePerm<>+32(SB)/4, $8
DATA scorePerm<>+36(SB)/4, $12
DATA scorePerm<>+40(SB)/4, $9
DATA scorePerm<>+44(SB)/4, $13
DATA scorePerm<>+48(SB)/4, $10
DATA scorePerm<>+52(SB)/4, $14
DATA scorePerm<>+56(SB)/4, $11
DATA scorePerm<>+60(SB)/4, $15
GLOBL scorePerm<>(SB), RODATA|NOPTR, $64

// PAIRSUM(x, y, t, d): per 128-bit lane, d = [x0+x1, x2+x3, y0+y1, y2+y3] (t is scratch).
#define PAIRSUM(x, y, t, d) \
	VSHUFPS $0xdd, y, x, t; \
	VSHUFPS $0x88, y, x, d; \
	VADDPS  t, d, d

// KEYSUM(a0, a1, a2, a3, t0, t1, d): one key's four row-pair accumulators (rows 01, 23,
// 45, 67, each [row 2m: 8 lanes | row 2m+1: 8 lanes]) to d, whose 128-bit lane L holds
// [r0 r2 r4 r6] partial sums (L = 0, 1: the even rows' two halves; 2, 3: the odd rows').
#define KEYSUM(a0, a1, a2, a3, t0, t1, d) \
	PAIRSUM(a0, a1, t0, t1); \
	PAIRSUM(a2, a3, t0, d); \
	PAIRSUM(t1, d, t0, d)

// KEYPAIR(u, v, t, d): the two keys' KEYSUMs u and v to d = [u's rows 0-7 | v's rows
// 0-7] in row order (Z14 holds scorePerm).
#define KEYPAIR(u, v, t, d) \
	VSHUFF32X4 $0xdd, v, u, t; \
	VSHUFF32X4 $0x88, v, u, d; \
	VADDPS     t, d, d; \
	VPERMPS    d, Z14, d

// STORE_SCORES4 reduces the four keys' accumulators Z16-Z31 and stores their scores of
// the 8 rows at BX, one key's R13 bytes after the other's (CX, Z0-Z9 scratch).
#define STORE_SCORES4 \
	KEYSUM(Z16, Z17, Z18, Z19, Z0, Z1, Z2); \
	KEYSUM(Z20, Z21, Z22, Z23, Z0, Z1, Z3); \
	KEYSUM(Z24, Z25, Z26, Z27, Z0, Z1, Z4); \
	KEYSUM(Z28, Z29, Z30, Z31, Z0, Z1, Z5); \
	KEYPAIR(Z2, Z3, Z0, Z6); \
	KEYPAIR(Z4, Z5, Z0, Z7); \
	VEXTRACTF64X4 $1, Z6, Y8; \
	VEXTRACTF64X4 $1, Z7, Y9; \
	LEAQ          (BX)(R13*2), CX; \
	VMOVUPS       Y6, (BX); \
	VMOVUPS       Y8, (BX)(R13*1); \
	VMOVUPS       Y7, (CX); \
	VMOVUPS       Y9, (CX)(R13*1)

// ZERO_ACC clears the sixteen accumulators Z16-Z31.
#define ZERO_ACC \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31

// The value sums keep one output row's 32-dim block in two registers, A_r (Z16 + r) and
// B_r (Z24 + r) for row r of the 8, so a key's probability of a row is one broadcast and
// the key's value block meets it in two FMAs (no shuffle a key). In memory a quad's chunk
// c (8 floats) of row r is at 128c + 32r from the quad's block (R8 for rows 0-3, DX for
// 4-7); each register holds two of the block's four chunks, one a 256-bit half: float32
// values load as dims 0-15 and 16-31 (A = chunks 0|1, B = 2|3), bf16 ones as even and odd
// dims of the 32 (A = chunks 0|2, B = 1|3: pair order, attention_tiled.go).
#define LOAD_HALVES(lo, hi, base, y, z) \
	VMOVUPS      lo(base), y; \
	VINSERTF64X4 $1, hi(base), z, z

#define STORE_HALVES(lo, hi, base, y, z) \
	VMOVUPS       y, lo(base); \
	VEXTRACTF64X4 $1, z, hi(base)

// ROWS applies OP (LOAD_HALVES or STORE_HALVES) to the 8 rows' A and B registers, A_r's
// upper half AHI bytes after its lower and B_r's lower half BLO bytes after A_r's.
#define ROWS(OP, AHI, BLO) \
	OP(0, AHI+0, R8, Y16, Z16); \
	OP(BLO+0, 384, R8, Y24, Z24); \
	OP(32, AHI+32, R8, Y17, Z17); \
	OP(BLO+32, 416, R8, Y25, Z25); \
	OP(64, AHI+64, R8, Y18, Z18); \
	OP(BLO+64, 448, R8, Y26, Z26); \
	OP(96, AHI+96, R8, Y19, Z19); \
	OP(BLO+96, 480, R8, Y27, Z27); \
	OP(0, AHI+0, DX, Y20, Z20); \
	OP(BLO+0, 384, DX, Y28, Z28); \
	OP(32, AHI+32, DX, Y21, Z21); \
	OP(BLO+32, 416, DX, Y29, Z29); \
	OP(64, AHI+64, DX, Y22, Z22); \
	OP(BLO+64, 448, DX, Y30, Z30); \
	OP(96, AHI+96, DX, Y23, Z23); \
	OP(BLO+96, 480, DX, Y31, Z31)

#define LOAD_ROWS_F32 ROWS(LOAD_HALVES, 128, 256)
#define STORE_ROWS_F32 ROWS(STORE_HALVES, 128, 256)
#define LOAD_ROWS_BF16 ROWS(LOAD_HALVES, 256, 128)
#define STORE_ROWS_BF16 ROWS(STORE_HALVES, 256, 128)

// BROADCAST_P spreads key j's probabilities of the 8 rows (at R12) over Z2-Z9, and
// ROW_FMAS adds them times the key's value halves Z0 (to A_r) and Z1 (to B_r).
#define BROADCAST_P \
	VBROADCASTSS 0(R12), Z2; \
	VBROADCASTSS 4(R12), Z3; \
	VBROADCASTSS 8(R12), Z4; \
	VBROADCASTSS 12(R12), Z5; \
	VBROADCASTSS 16(R12), Z6; \
	VBROADCASTSS 20(R12), Z7; \
	VBROADCASTSS 24(R12), Z8; \
	VBROADCASTSS 28(R12), Z9

#define ROW_FMAS \
	VFMADD231PS Z2, Z0, Z16; \
	VFMADD231PS Z2, Z1, Z24; \
	VFMADD231PS Z3, Z0, Z17; \
	VFMADD231PS Z3, Z1, Z25; \
	VFMADD231PS Z4, Z0, Z18; \
	VFMADD231PS Z4, Z1, Z26; \
	VFMADD231PS Z5, Z0, Z19; \
	VFMADD231PS Z5, Z1, Z27; \
	VFMADD231PS Z6, Z0, Z20; \
	VFMADD231PS Z6, Z1, Z28; \
	VFMADD231PS Z7, Z0, Z21; \
	VFMADD231PS Z7, Z1, Z29; \
	VFMADD231PS Z8, Z0, Z22; \
	VFMADD231PS Z8, Z1, Z30; \
	VFMADD231PS Z9, Z0, Z23; \
	VFMADD231PS Z9, Z1, Z31

// func attnScoresAVX512(q *float32, nq, D int, k *float32, kStride, nk int, s *float32)
// Four keys at a time: per chunk of 8 dims, the four keys' chunks (broadcast) meet the
// 8 rows' (4 zmm) in 16 accumulators Z16-Z31; the accumulators are then reduced across
// their lanes by shuffles, 2 x 8 sums per pair of keys. A last 1-3 keys go one at a time.
TEXT ·attnScoresAVX512(SB), NOSPLIT, $0-56
	MOVQ      nq+8(FP), R13
	SHLQ      $2, R13           // R13: bytes of one key's scores
	MOVQ      D+16(FP), R11
	SHLQ      $2, R11           // R11: bytes of a plain row (a quad: 4x)
	MOVQ      k+24(FP), DI
	MOVQ      kStride+32(FP), R9
	SHLQ      $2, R9            // R9: bytes between key rows
	MOVQ      nk+40(FP), R10
	MOVQ      s+48(FP), DX
	VMOVDQU32 scorePerm<>(SB), Z14

keys4:
	CMPQ R10, $4
	JLT  key1
	MOVQ q+0(FP), AX            // AX: the 8-row group's first quad
	MOVQ DX, BX                 // BX: its scores of key j
	LEAQ (DI)(R11*1), SI        // SI: end of key j's row

group4:
	ZERO_ACC
	MOVQ   DI, CX               // key j's chunk (j+2: CX + 2 R9)
	LEAQ   (DI)(R9*1), R12      // key j+1's chunk (j+3: R12 + 2 R9)
	MOVQ   AX, R8               // the first quad's chunk (the second quad: R8 + 4 R11)

chunk4:
	VBROADCASTF64X4 (CX), Z0
	VBROADCASTF64X4 (R12), Z1
	VBROADCASTF64X4 (CX)(R9*2), Z2
	VBROADCASTF64X4 (R12)(R9*2), Z3
	VMOVUPS         (R8), Z4
	VMOVUPS         64(R8), Z5
	VMOVUPS         (R8)(R11*4), Z6
	VMOVUPS         64(R8)(R11*4), Z7
	VFMADD231PS     Z4, Z0, Z16
	VFMADD231PS     Z5, Z0, Z17
	VFMADD231PS     Z6, Z0, Z18
	VFMADD231PS     Z7, Z0, Z19
	VFMADD231PS     Z4, Z1, Z20
	VFMADD231PS     Z5, Z1, Z21
	VFMADD231PS     Z6, Z1, Z22
	VFMADD231PS     Z7, Z1, Z23
	VFMADD231PS     Z4, Z2, Z24
	VFMADD231PS     Z5, Z2, Z25
	VFMADD231PS     Z6, Z2, Z26
	VFMADD231PS     Z7, Z2, Z27
	VFMADD231PS     Z4, Z3, Z28
	VFMADD231PS     Z5, Z3, Z29
	VFMADD231PS     Z6, Z3, Z30
	VFMADD231PS     Z7, Z3, Z31
	ADDQ            $32, CX
	ADDQ            $32, R12
	ADDQ            $128, R8
	CMPQ            CX, SI
	JLT             chunk4

	STORE_SCORES4
	ADDQ          $32, BX
	LEAQ          (AX)(R11*8), AX // the next two quads
	LEAQ          (DX)(R13*1), CX
	CMPQ          BX, CX
	JLT           group4

	LEAQ (DI)(R9*4), DI
	LEAQ (DX)(R13*4), DX
	SUBQ $4, R10
	JMP  keys4

key1:
	TESTQ R10, R10
	JZ    sdone
	MOVQ  q+0(FP), AX
	MOVQ  DX, BX
	LEAQ  (DI)(R11*1), SI

group1:
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	MOVQ   DI, CX
	MOVQ   AX, R8

chunk1:
	VBROADCASTF64X4 (CX), Z0
	VFMADD231PS     (R8), Z0, Z16
	VFMADD231PS     64(R8), Z0, Z17
	VFMADD231PS     (R8)(R11*4), Z0, Z18
	VFMADD231PS     64(R8)(R11*4), Z0, Z19
	ADDQ            $32, CX
	ADDQ            $128, R8
	CMPQ            CX, SI
	JLT             chunk1

	KEYSUM(Z16, Z17, Z18, Z19, Z0, Z1, Z2)
	KEYPAIR(Z2, Z2, Z0, Z6)
	VMOVUPS Y6, (BX)
	ADDQ    $32, BX
	LEAQ    (AX)(R11*8), AX
	LEAQ    (DX)(R13*1), CX
	CMPQ    BX, CX
	JLT     group1

	ADDQ R9, DI
	ADDQ R13, DX
	DECQ R10
	JMP  key1

sdone:
	VZEROUPPER
	RET

// func attnAccumAVX512(p *float32, nq, D int, v *float32, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)
// Per 8 output rows (two quads) and block of 32 dims (D is a multiple of 32), 16
// accumulators Z16-Z31 stay in registers while every key's value block (Z0, Z1) meets its
// probabilities, broadcast a row a register. aheadK and aheadV are byte distances from a
// key's value block to rows the next passes read (the keys and values of the block's next
// KV head, else of the next block; stride for stride): the lines there are asked for as
// the values are read, so the memory fetches spread over the FMAs instead of waiting in
// one burst. aheadK 0 asks for nothing (a prefill's value passes, whose rows are cached;
// aheadV is then 0 too). toL2 asks with PREFETCHT1 instead of PREFETCHT0: into the L2
// cache, not the L1, where the 8 strips of the block's own values are still being read
// (attnAheadToL2).
TEXT ·attnAccumAVX512(SB), NOSPLIT, $0-73
	MOVQ nq+8(FP), R13
	SHLQ $2, R13                // R13: bytes of one key's probabilities
	MOVQ D+16(FP), R11
	SHLQ $2, R11                // R11: bytes of a plain row
	MOVQ vStride+32(FP), R9
	SHLQ $2, R9
	MOVQ aheadK+56(FP), SI
	MOVQ aheadV+64(FP), R15
	MOVQ o+48(FP), AX           // AX: the 8-row group's first quad
	MOVQ p+0(FP), BX            // BX: its probabilities of key 0

agroup:
	XORQ CX, CX                 // CX: the block's first chunk, in bytes of a plain row

ablock:
	LEAQ (AX)(CX*4), R8         // the first quad at the block
	LEAQ (R8)(R11*4), DX        // the second
	LOAD_ROWS_F32
	MOVQ v+24(FP), DI
	ADDQ CX, DI                 // key 0's value block
	MOVQ BX, R12
	MOVQ nk+40(FP), R10

akeys:
	VMOVUPS    (DI), Z0         // dims 0-15: chunks 0 and 1
	VMOVUPS    64(DI), Z1       // dims 16-31: chunks 2 and 3
	TESTQ      SI, SI
	JZ         anext
	CMPB       toL2+72(FP), $0
	JNE        al2
	PREFETCHT0 (DI)(SI*1)
	PREFETCHT0 64(DI)(SI*1)
	PREFETCHT0 (DI)(R15*1)
	PREFETCHT0 64(DI)(R15*1)
	JMP        anext

al2:
	PREFETCHT1 (DI)(SI*1)
	PREFETCHT1 64(DI)(SI*1)
	PREFETCHT1 (DI)(R15*1)
	PREFETCHT1 64(DI)(R15*1)

anext:
	BROADCAST_P
	ROW_FMAS
	ADDQ       R9, DI
	ADDQ       R13, R12
	DECQ       R10
	JNZ        akeys

	STORE_ROWS_F32
	ADDQ $128, CX
	CMPQ CX, R11
	JLT  ablock

	ADDQ $32, BX
	LEAQ (AX)(R11*8), AX
	MOVQ p+0(FP), CX
	ADDQ R13, CX
	CMPQ BX, CX
	JLT  agroup
	VZEROUPPER
	RET

// The exponential's constants, those of attention_amd64.s's AVX2 kernel.
DATA e16Const<>+0(SB)/4, $-125.0
DATA e16Const<>+4(SB)/4, $0.6931471805599453
DATA e16Const<>+8(SB)/4, $1.0
DATA e16Const<>+12(SB)/4, $0.001388888888888889
DATA e16Const<>+16(SB)/4, $0.008333333333333333
DATA e16Const<>+20(SB)/4, $0.041666666666666664
DATA e16Const<>+24(SB)/4, $0.16666666666666666
DATA e16Const<>+28(SB)/4, $0.5
DATA e16Const<>+32(SB)/4, $127
GLOBL e16Const<>(SB), RODATA|NOPTR, $36

// func attnExp2Sum16AVX512(s *float32, n, stride int, m, l *float32)
// For the n runs of 16 floats at s, stride bytes apart: s = 2^(s - m) as exp2f computes
// it (the AVX2 kernel's steps; 0 where s - m is below -125), l += s, lane by lane (m and l
// are 16 floats). The softmax of a key block: 16 rows per run (nq a multiple of 16), or
// two keys' 8 rows (nq = 8, m and l doubled by the caller).
TEXT ·attnExp2Sum16AVX512(SB), NOSPLIT, $0-40
	MOVQ         s+0(FP), DI
	MOVQ         n+8(FP), CX
	MOVQ         stride+16(FP), R9
	MOVQ         m+24(FP), DX
	MOVQ         l+32(FP), BX
	VMOVUPS      (DX), Z0
	VMOVUPS      (BX), Z6
	VBROADCASTSS e16Const<>+0(SB), Z16
	VBROADCASTSS e16Const<>+4(SB), Z17
	VBROADCASTSS e16Const<>+8(SB), Z18
	VBROADCASTSS e16Const<>+12(SB), Z19
	VBROADCASTSS e16Const<>+16(SB), Z20
	VBROADCASTSS e16Const<>+20(SB), Z21
	VBROADCASTSS e16Const<>+24(SB), Z22
	VBROADCASTSS e16Const<>+28(SB), Z23
	VPBROADCASTD e16Const<>+32(SB), Z24
	TESTQ        CX, CX
	JZ           e16done

e16loop:
	VMOVUPS     (DI), Z1
	VSUBPS      Z0, Z1, Z1          // x = s - m
	VCMPPS      $0x1d, Z16, Z1, K1  // x >= -125 (else 0)
	VRNDSCALEPS $0, Z1, Z3          // n
	VSUBPS      Z3, Z1, Z4
	VMULPS      Z17, Z4, Z4         // f = (x - n)·ln2
	VMOVAPS     Z19, Z5
	VFMADD213PS Z20, Z4, Z5
	VFMADD213PS Z21, Z4, Z5
	VFMADD213PS Z22, Z4, Z5
	VFMADD213PS Z23, Z4, Z5
	VFMADD213PS Z18, Z4, Z5
	VFMADD213PS Z18, Z4, Z5         // e^f
	VCVTPS2DQ   Z3, Z3
	VPADDD      Z24, Z3, Z3
	VPSLLD      $23, Z3, Z3         // 2^n
	VMULPS.Z    Z3, Z5, K1, Z5
	VMOVUPS     Z5, (DI)
	VADDPS      Z5, Z6, Z6
	ADDQ        R9, DI
	DECQ        CX
	JNZ         e16loop

e16done:
	VMOVUPS Z6, (BX)
	VZEROUPPER
	RET


// The bf16 kernels below read the cache's rows in place, q and o in pair order
// (attention_tiled.go): a 32-byte load holds 16 dims as 8 words of two bf16 each, even
// dim low; VPSLLD $16 makes the even dims float32 and a mask of the high halves the odd
// ones, which multiply chunks 2c and 2c+1 of the packed rows.
DATA bf16HighHalf<>+0(SB)/4, $0xffff0000
GLOBL bf16HighHalf<>(SB), RODATA|NOPTR, $4

// func attnScoresBF16AVX512(q *float32, nq, D int, k *uint16, kStride, nk int, s *float32)
// attnScoresAVX512 over bf16 keys, 16 dims a step: the four keys' words (broadcast, Z0-Z3)
// become their even dims (Z8-Z11) against chunk 2c of the 8 rows, then their odd dims
// against chunk 2c+1. Z13 holds the mask.
TEXT ·attnScoresBF16AVX512(SB), NOSPLIT, $0-56
	MOVQ         nq+8(FP), R13
	SHLQ         $2, R13        // R13: bytes of one key's scores
	MOVQ         D+16(FP), R11
	SHLQ         $2, R11        // R11: bytes of a plain float32 row (a quad: 4x)
	MOVQ         k+24(FP), DI
	MOVQ         kStride+32(FP), R9
	SHLQ         $1, R9         // R9: bytes between key rows
	MOVQ         nk+40(FP), R10
	MOVQ         s+48(FP), DX
	VMOVDQU32    scorePerm<>(SB), Z14
	VPBROADCASTD bf16HighHalf<>(SB), Z13

bkeys4:
	CMPQ R10, $4
	JLT  bkey1
	MOVQ q+0(FP), AX            // AX: the 8-row group's first quad
	MOVQ DX, BX                 // BX: its scores of key j
	MOVQ R11, SI
	SHRQ $1, SI
	ADDQ DI, SI                 // SI: end of key j's row

bgroup4:
	ZERO_ACC
	MOVQ   DI, CX               // key j's 16 dims (j+2: CX + 2 R9)
	LEAQ   (DI)(R9*1), R12      // key j+1's (j+3: R12 + 2 R9)
	MOVQ   AX, R8               // the first quad's chunk 2c (the second quad: R8 + 4 R11)

bchunk4:
	VBROADCASTI64X4 (CX), Z0
	VBROADCASTI64X4 (R12), Z1
	VBROADCASTI64X4 (CX)(R9*2), Z2
	VBROADCASTI64X4 (R12)(R9*2), Z3
	VMOVUPS         (R8), Z4
	VMOVUPS         64(R8), Z5
	VMOVUPS         (R8)(R11*4), Z6
	VMOVUPS         64(R8)(R11*4), Z7
	VPSLLD          $16, Z0, Z8
	VPSLLD          $16, Z1, Z9
	VPSLLD          $16, Z2, Z10
	VPSLLD          $16, Z3, Z11
	VFMADD231PS     Z4, Z8, Z16
	VFMADD231PS     Z5, Z8, Z17
	VFMADD231PS     Z6, Z8, Z18
	VFMADD231PS     Z7, Z8, Z19
	VFMADD231PS     Z4, Z9, Z20
	VFMADD231PS     Z5, Z9, Z21
	VFMADD231PS     Z6, Z9, Z22
	VFMADD231PS     Z7, Z9, Z23
	VFMADD231PS     Z4, Z10, Z24
	VFMADD231PS     Z5, Z10, Z25
	VFMADD231PS     Z6, Z10, Z26
	VFMADD231PS     Z7, Z10, Z27
	VFMADD231PS     Z4, Z11, Z28
	VFMADD231PS     Z5, Z11, Z29
	VFMADD231PS     Z6, Z11, Z30
	VFMADD231PS     Z7, Z11, Z31
	VMOVUPS         128(R8), Z4
	VMOVUPS         192(R8), Z5
	VMOVUPS         128(R8)(R11*4), Z6
	VMOVUPS         192(R8)(R11*4), Z7
	VPANDD          Z13, Z0, Z8
	VPANDD          Z13, Z1, Z9
	VPANDD          Z13, Z2, Z10
	VPANDD          Z13, Z3, Z11
	VFMADD231PS     Z4, Z8, Z16
	VFMADD231PS     Z5, Z8, Z17
	VFMADD231PS     Z6, Z8, Z18
	VFMADD231PS     Z7, Z8, Z19
	VFMADD231PS     Z4, Z9, Z20
	VFMADD231PS     Z5, Z9, Z21
	VFMADD231PS     Z6, Z9, Z22
	VFMADD231PS     Z7, Z9, Z23
	VFMADD231PS     Z4, Z10, Z24
	VFMADD231PS     Z5, Z10, Z25
	VFMADD231PS     Z6, Z10, Z26
	VFMADD231PS     Z7, Z10, Z27
	VFMADD231PS     Z4, Z11, Z28
	VFMADD231PS     Z5, Z11, Z29
	VFMADD231PS     Z6, Z11, Z30
	VFMADD231PS     Z7, Z11, Z31
	ADDQ            $32, CX
	ADDQ            $32, R12
	ADDQ            $256, R8
	CMPQ            CX, SI
	JLT             bchunk4

	STORE_SCORES4
	ADDQ          $32, BX
	LEAQ          (AX)(R11*8), AX // the next two quads
	LEAQ          (DX)(R13*1), CX
	CMPQ          BX, CX
	JLT           bgroup4

	LEAQ (DI)(R9*4), DI
	LEAQ (DX)(R13*4), DX
	SUBQ $4, R10
	JMP  bkeys4

bkey1:
	TESTQ R10, R10
	JZ    bsdone
	MOVQ  q+0(FP), AX
	MOVQ  DX, BX
	MOVQ  R11, SI
	SHRQ  $1, SI
	ADDQ  DI, SI

bgroup1:
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	MOVQ   DI, CX
	MOVQ   AX, R8

bchunk1:
	VBROADCASTI64X4 (CX), Z0
	VPSLLD          $16, Z0, Z1
	VPANDD          Z13, Z0, Z2
	VFMADD231PS     (R8), Z1, Z16
	VFMADD231PS     64(R8), Z1, Z17
	VFMADD231PS     (R8)(R11*4), Z1, Z18
	VFMADD231PS     64(R8)(R11*4), Z1, Z19
	VFMADD231PS     128(R8), Z2, Z16
	VFMADD231PS     192(R8), Z2, Z17
	VFMADD231PS     128(R8)(R11*4), Z2, Z18
	VFMADD231PS     192(R8)(R11*4), Z2, Z19
	ADDQ            $32, CX
	ADDQ            $256, R8
	CMPQ            CX, SI
	JLT             bchunk1

	KEYSUM(Z16, Z17, Z18, Z19, Z0, Z1, Z2)
	KEYPAIR(Z2, Z2, Z0, Z6)
	VMOVUPS Y6, (BX)
	ADDQ    $32, BX
	LEAQ    (AX)(R11*8), AX
	LEAQ    (DX)(R13*1), CX
	CMPQ    BX, CX
	JLT     bgroup1

	ADDQ R9, DI
	ADDQ R13, DX
	DECQ R10
	JMP  bkey1

bsdone:
	VZEROUPPER
	RET

// func attnAccumBF16AVX512(p *float32, nq, D int, v *uint16, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)
// attnAccumAVX512 over bf16 values: a key's block of 32 dims is one 64-byte load, whose
// even dims (shifted up) are chunks 0 and 2 of the block and odd dims (masked) chunks 1
// and 3; one line of each stream ahead a key.
TEXT ·attnAccumBF16AVX512(SB), NOSPLIT, $0-73
	MOVQ         nq+8(FP), R13
	SHLQ         $2, R13        // R13: bytes of one key's probabilities
	MOVQ         D+16(FP), R11
	SHLQ         $2, R11        // R11: bytes of a plain float32 row
	MOVQ         vStride+32(FP), R9
	SHLQ         $1, R9
	VPBROADCASTD bf16HighHalf<>(SB), Z13
	MOVQ         aheadK+56(FP), SI
	MOVQ         aheadV+64(FP), R15
	MOVQ         o+48(FP), AX   // AX: the 8-row group's first quad
	MOVQ         p+0(FP), BX    // BX: its probabilities of key 0

bagroup:
	XORQ CX, CX                 // CX: the block's first chunk, in bytes of a plain row

bablock:
	LEAQ (AX)(CX*4), R8         // the first quad at the block
	LEAQ (R8)(R11*4), DX        // the second
	LOAD_ROWS_BF16
	MOVQ CX, DI
	SHRQ $1, DI
	ADDQ v+24(FP), DI           // key 0's value words of the block
	MOVQ BX, R12
	MOVQ nk+40(FP), R10

bakeys:
	VMOVDQU32  (DI), Z0
	TESTQ      SI, SI
	JZ         banext
	CMPB       toL2+72(FP), $0
	JNE        bal2
	PREFETCHT0 (DI)(SI*1)
	PREFETCHT0 (DI)(R15*1)
	JMP        banext

bal2:
	PREFETCHT1 (DI)(SI*1)
	PREFETCHT1 (DI)(R15*1)

banext:
	VPANDD     Z13, Z0, Z1      // odd dims: chunks 1 and 3
	VPSLLD     $16, Z0, Z0      // even dims: chunks 0 and 2
	BROADCAST_P
	ROW_FMAS
	ADDQ       R9, DI
	ADDQ       R13, R12
	DECQ       R10
	JNZ        bakeys

	STORE_ROWS_BF16
	ADDQ $128, CX
	CMPQ CX, R11
	JLT  bablock

	ADDQ $32, BX
	LEAQ (AX)(R11*8), AX
	MOVQ p+0(FP), CX
	ADDQ R13, CX
	CMPQ BX, CX
	JLT  bagroup
	VZEROUPPER
	RET

// bf16 products (newAVX512DotAttnKernels, AVX512_BF16): a bf16 cache's keys and values meet the
// query rows and the probabilities rounded to bf16 in VDPBF16PS, which multiplies the two
// bf16 halves of each 32-bit lane and adds both products to the lane's float32: half the
// instructions of the float32 FMAs per product. The Go assembler has no mnemonic for it
// or for VCVTNEPS2BF16, so the macros below spell their EVEX encodings out (checked by
// TestAttnDotKernelsMatchGo against the Go kernels, and by objdump when written).

// VDPBF16PS_Z(s2, s1, d): zmm d += the bf16 pair products of zmm s1 and zmm s2 (register
// numbers 0-31), EVEX.512.F3.0F38.W0 52 /r: d in ModRM.reg (R, R'), s1 in EVEX.vvvv
// (V'), s2 in ModRM.rm (B, X), each extension bit stored inverted.
#define VDPBF16PS_Z(s2, s1, d) \
	BYTE $0x62; \
	BYTE $(((1-(((d)>>3)&1))<<7) | ((1-(((s2)>>4)&1))<<6) | ((1-(((s2)>>3)&1))<<5) | ((1-(((d)>>4)&1))<<4) | 2); \
	BYTE $(((15-((s1)&15))<<3) | 6); \
	BYTE $(0x40 | ((1-(((s1)>>4)&1))<<3)); \
	BYTE $0x52; \
	BYTE $(0xC0 | (((d)&7)<<3) | ((s2)&7))

// VCVTNEPS2BF16_Y(s, d): xmm d = ymm s's eight floats rounded to bf16 (to nearest even),
// EVEX.256.F3.0F38.W0 72 /r, registers 0-7.
#define VCVTNEPS2BF16_Y(s, d) \
	BYTE $0x62; BYTE $0xF2; BYTE $0x7E; BYTE $0x28; BYTE $0x72; \
	BYTE $(0xC0 | ((d)<<3) | (s))

// DOT4(q, a0, a1, a2, a3): the four keys' chunks (Z0-Z3) against the row pair in zmm q,
// into the four keys' accumulators of that pair (the float32 chunk loop's FMAs).
#define DOT4(q, a0, a1, a2, a3) \
	VDPBF16PS_Z(q, 0, a0); \
	VDPBF16PS_Z(q, 1, a1); \
	VDPBF16PS_Z(q, 2, a2); \
	VDPBF16PS_Z(q, 3, a3)

// func attnScoresDotAVX512(q *uint16, nq, D int, k *uint16, kStride, nk int, s *float32)
// attnScoresAVX512 over bf16 query rows and a bf16 cache: a quad's chunk c is 16 dims of
// each row (32 bytes: 8 lanes of two dims), row r's at byte 128c + 32r, and a key's chunk
// c is its dims 16c..16c+15 as stored, broadcast to both halves of a zmm. The lanes'
// sums, the reduction and the stores are the float32 kernel's.
TEXT ·attnScoresDotAVX512(SB), NOSPLIT, $0-56
	MOVQ      nq+8(FP), R13
	SHLQ      $2, R13           // R13: bytes of one key's scores
	MOVQ      D+16(FP), R11
	SHLQ      $1, R11           // R11: bytes of a plain bf16 row (a quad: 4x)
	MOVQ      k+24(FP), DI
	MOVQ      kStride+32(FP), R9
	SHLQ      $1, R9            // R9: bytes between key rows
	MOVQ      nk+40(FP), R10
	MOVQ      s+48(FP), DX
	VMOVDQU32 scorePerm<>(SB), Z14

dkeys4:
	CMPQ R10, $4
	JLT  dkey1
	MOVQ q+0(FP), AX
	MOVQ DX, BX
	LEAQ (DI)(R11*1), SI

dgroup4:
	ZERO_ACC
	MOVQ DI, CX
	LEAQ (DI)(R9*1), R12
	MOVQ AX, R8

dchunk4:
	VBROADCASTF64X4 (CX), Z0
	VBROADCASTF64X4 (R12), Z1
	VBROADCASTF64X4 (CX)(R9*2), Z2
	VBROADCASTF64X4 (R12)(R9*2), Z3
	VMOVUPS         (R8), Z4
	VMOVUPS         64(R8), Z5
	VMOVUPS         (R8)(R11*4), Z6
	VMOVUPS         64(R8)(R11*4), Z7
	DOT4(4, 16, 20, 24, 28)
	DOT4(5, 17, 21, 25, 29)
	DOT4(6, 18, 22, 26, 30)
	DOT4(7, 19, 23, 27, 31)
	ADDQ            $32, CX
	ADDQ            $32, R12
	ADDQ            $128, R8
	CMPQ            CX, SI
	JLT             dchunk4

	STORE_SCORES4
	ADDQ          $32, BX
	LEAQ          (AX)(R11*8), AX
	LEAQ          (DX)(R13*1), CX
	CMPQ          BX, CX
	JLT           dgroup4

	LEAQ (DI)(R9*4), DI
	LEAQ (DX)(R13*4), DX
	SUBQ $4, R10
	JMP  dkeys4

dkey1:
	TESTQ R10, R10
	JZ    ddone
	MOVQ  q+0(FP), AX
	MOVQ  DX, BX
	LEAQ  (DI)(R11*1), SI

dgroup1:
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	MOVQ   DI, CX
	MOVQ   AX, R8

dchunk1:
	VBROADCASTF64X4 (CX), Z0
	VMOVUPS         (R8), Z4
	VMOVUPS         64(R8), Z5
	VMOVUPS         (R8)(R11*4), Z6
	VMOVUPS         64(R8)(R11*4), Z7
	VDPBF16PS_Z(4, 0, 16)
	VDPBF16PS_Z(5, 0, 17)
	VDPBF16PS_Z(6, 0, 18)
	VDPBF16PS_Z(7, 0, 19)
	ADDQ            $32, CX
	ADDQ            $128, R8
	CMPQ            CX, SI
	JLT             dchunk1

	KEYSUM(Z16, Z17, Z18, Z19, Z0, Z1, Z2)
	KEYPAIR(Z2, Z2, Z0, Z6)
	VMOVUPS Y6, (BX)
	ADDQ    $32, BX
	LEAQ    (AX)(R11*8), AX
	LEAQ    (DX)(R13*1), CX
	CMPQ    BX, CX
	JLT     dgroup1

	ADDQ R9, DI
	ADDQ R13, DX
	DECQ R10
	JMP  dkey1

ddone:
	VZEROUPPER
	RET

// func attnPairProbsAVX512(p *float32, nq, nk int, pp *uint32)
// The value sums' probabilities in key pairs: pp[(j/2)*nq + i] holds p[j*nq+i] rounded to
// bf16 in its low half and p[(j+1)*nq+i] in its high half (0 past an odd nk's last key),
// as VDPBF16PS pairs them with two keys' interleaved value dims. nq is a multiple of 8.
TEXT ·attnPairProbsAVX512(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ nq+8(FP), R13
	SHLQ $2, R13                // R13: bytes of one key's probabilities (and of a pair's)
	MOVQ nk+16(FP), R10
	MOVQ pp+24(FP), DI

ppairs:
	CMPQ R10, $2
	JLT  plast
	XORQ CX, CX

ppair:
	VMOVUPS (SI)(CX*1), Y0
	LEAQ    (SI)(R13*1), DX
	VMOVUPS (DX)(CX*1), Y1
	VCVTNEPS2BF16_Y(0, 0)
	VCVTNEPS2BF16_Y(1, 1)
	VPUNPCKLWD X1, X0, X2       // rows 0-3: (key j, key j+1) a lane
	VPUNPCKHWD X1, X0, X3       // rows 4-7
	VMOVDQU    X2, (DI)(CX*1)
	VMOVDQU    X3, 16(DI)(CX*1)
	ADDQ       $32, CX
	CMPQ       CX, R13
	JLT        ppair

	LEAQ (SI)(R13*2), SI
	ADDQ R13, DI
	SUBQ $2, R10
	JMP  ppairs

plast:
	TESTQ  R10, R10
	JZ     pdone
	XORQ   CX, CX
	VPXOR  X1, X1, X1

plastrow:
	VMOVUPS (SI)(CX*1), Y0
	VCVTNEPS2BF16_Y(0, 0)
	VPUNPCKLWD X1, X0, X2
	VPUNPCKHWD X1, X0, X3
	VMOVDQU    X2, (DI)(CX*1)
	VMOVDQU    X3, 16(DI)(CX*1)
	ADDQ       $32, CX
	CMPQ       CX, R13
	JLT        plastrow

pdone:
	VZEROUPPER
	RET

// PAIR_DOTS adds the key pair's probabilities of the 8 rows (Z2-Z9, a pair a lane) times
// its interleaved value dims Z0 (to A_r) and Z1 (to B_r).
#define PAIR_DOTS \
	VDPBF16PS_Z(0, 2, 16); \
	VDPBF16PS_Z(1, 2, 24); \
	VDPBF16PS_Z(0, 3, 17); \
	VDPBF16PS_Z(1, 3, 25); \
	VDPBF16PS_Z(0, 4, 18); \
	VDPBF16PS_Z(1, 4, 26); \
	VDPBF16PS_Z(0, 5, 19); \
	VDPBF16PS_Z(1, 5, 27); \
	VDPBF16PS_Z(0, 6, 20); \
	VDPBF16PS_Z(1, 6, 28); \
	VDPBF16PS_Z(0, 7, 21); \
	VDPBF16PS_Z(1, 7, 29); \
	VDPBF16PS_Z(0, 8, 22); \
	VDPBF16PS_Z(1, 8, 30); \
	VDPBF16PS_Z(0, 9, 23); \
	VDPBF16PS_Z(1, 9, 31)

// BROADCAST_PAIRS spreads a key pair's probability pairs of the 8 rows (at R12) over Z2-Z9.
#define BROADCAST_PAIRS \
	VPBROADCASTD 0(R12), Z2; \
	VPBROADCASTD 4(R12), Z3; \
	VPBROADCASTD 8(R12), Z4; \
	VPBROADCASTD 12(R12), Z5; \
	VPBROADCASTD 16(R12), Z6; \
	VPBROADCASTD 20(R12), Z7; \
	VPBROADCASTD 24(R12), Z8; \
	VPBROADCASTD 28(R12), Z9

// AHEAD(to) asks, with prefetch instruction to, for the line of the next passes' rows at
// the value block DI's distances SI (keys) and R15 (values): a pass's 32 bf16 dims are one
// line of each row, so the eight passes of a 256-dim head ask for the next pass's rows
// whole, as attnAccumBF16AVX512 does.
#define AHEAD(to) \
	to (DI)(SI*1); \
	to (DI)(R15*1)

// func attnAccumDotAVX512(pp *uint32, nq, D int, v *uint16, vStride, nk int, o *float32, aheadK, aheadV int, toL2 bool)
// attnAccumBF16AVX512 over key pairs: per 8 output rows and block of 32 dims, two keys'
// value blocks are interleaved word by word (VPUNPCKLWD: dims 8L..8L+3 of each 128-bit
// lane L, a key pair a 32-bit lane, to Z0; VPUNPCKHWD: dims 8L+4..8L+7 to Z1) and meet
// the pair's probabilities (attnPairProbsAVX512) in one VDPBF16PS per row and half. So
// A_r's lane 4L+i holds dim 8L+i of the block and B_r's dim 8L+4+i; in memory A_r is the
// block's chunks 0|1 and B_r chunks 2|3, as the float32 kernel keeps them (dotOutDim is
// the map). An odd nk's last key pairs with zeros. aheadK, aheadV and toL2 as in
// attnAccumAVX512, for both keys of a pair.
TEXT ·attnAccumDotAVX512(SB), NOSPLIT, $0-73
	MOVQ nq+8(FP), R13
	SHLQ $2, R13                // R13: bytes of one key pair's probability pairs
	MOVQ D+16(FP), R11
	SHLQ $2, R11                // R11: bytes of a plain float32 output row
	MOVQ vStride+32(FP), R9
	SHLQ $1, R9                 // R9: bytes between value rows
	MOVQ aheadK+56(FP), SI
	MOVQ aheadV+64(FP), R15
	MOVQ o+48(FP), AX
	MOVQ pp+0(FP), BX

dagroup:
	XORQ CX, CX                 // CX: the block's first float32 chunk, in bytes of a plain row

dablock:
	LEAQ (AX)(CX*4), R8
	LEAQ (R8)(R11*4), DX
	LOAD_ROWS_F32
	MOVQ v+24(FP), DI
	MOVQ CX, R10
	SHRQ $1, R10
	ADDQ R10, DI                // key 0's value block (bf16: half the float32 offset)
	MOVQ BX, R12
	MOVQ nk+40(FP), R10

dapairs:
	CMPQ      R10, $2
	JLT       dalast
	VMOVDQU32 (DI), Z10
	TESTQ     SI, SI
	JZ        dasecond
	CMPB      toL2+72(FP), $0
	JNE       dal2a
	AHEAD(PREFETCHT0)
	JMP       dasecond

dal2a:
	AHEAD(PREFETCHT1)

dasecond:
	ADDQ      R9, DI
	VMOVDQU32 (DI), Z11
	TESTQ     SI, SI
	JZ        dadots
	CMPB      toL2+72(FP), $0
	JNE       dal2b
	AHEAD(PREFETCHT0)
	JMP       dadots

dal2b:
	AHEAD(PREFETCHT1)

dadots:
	VPUNPCKLWD Z11, Z10, Z0
	VPUNPCKHWD Z11, Z10, Z1
	BROADCAST_PAIRS
	PAIR_DOTS
	ADDQ       R9, DI
	ADDQ       R13, R12
	SUBQ       $2, R10
	JMP        dapairs

dalast:
	TESTQ      R10, R10
	JZ         dastore
	VMOVDQU32  (DI), Z10
	VPXORD     Z11, Z11, Z11
	VPUNPCKLWD Z11, Z10, Z0
	VPUNPCKHWD Z11, Z10, Z1
	BROADCAST_PAIRS
	PAIR_DOTS

dastore:
	STORE_ROWS_F32
	ADDQ $128, CX
	CMPQ CX, R11
	JLT  dablock

	ADDQ $32, BX
	LEAQ (AX)(R11*8), AX
	MOVQ pp+0(FP), CX
	ADDQ R13, CX
	CMPQ BX, CX
	JLT  dagroup
	VZEROUPPER
	RET
