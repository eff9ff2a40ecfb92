// AVX2/FMA kernels of the tiled attention (attention_tiled.go). Query and output rows
// are packed in quads: chunk c (8 floats) of row r of a quad lies at byte 4*(32c) + 32r
// of the quad, so with CX = 32c (the chunk's offset in a plain row) the four rows are at
// 0, 32, 64 and 96 (AX)(CX*4). Scores are key-major: s[j*nq + i].

#include "textflag.h"

// Go's ABIInternal keeps R14 (g) and X15 (zero) fixed across calls into assembly, so
// these kernels leave both alone.

// REDUCE4 sums each of a, b, c, d (ymm) into one lane of the xmm of a: [Σa, Σb, Σc, Σd].
#define REDUCE4(a, b, c, d, xa, tmp, xtmp) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, xtmp; \
	VADDPS xtmp, xa, xa

// ZERO_ACC8 clears the eight accumulators Y0-Y7.
#define ZERO_ACC8 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// LOAD_O8(sc) and STORE_O8(sc) move a quad's pair of output chunks (at AX + sc·CX: the
// float32 kernel's CX walks a float32 row, the bf16 one's a bf16 row) into and out of
// Y0-Y7.
#define LOAD_O8(sc) \
	VMOVUPS 0(AX)(CX*sc), Y0; \
	VMOVUPS 32(AX)(CX*sc), Y1; \
	VMOVUPS 64(AX)(CX*sc), Y2; \
	VMOVUPS 96(AX)(CX*sc), Y3; \
	VMOVUPS 128(AX)(CX*sc), Y4; \
	VMOVUPS 160(AX)(CX*sc), Y5; \
	VMOVUPS 192(AX)(CX*sc), Y6; \
	VMOVUPS 224(AX)(CX*sc), Y7

#define STORE_O8(sc) \
	VMOVUPS Y0, 0(AX)(CX*sc); \
	VMOVUPS Y1, 32(AX)(CX*sc); \
	VMOVUPS Y2, 64(AX)(CX*sc); \
	VMOVUPS Y3, 96(AX)(CX*sc); \
	VMOVUPS Y4, 128(AX)(CX*sc); \
	VMOVUPS Y5, 160(AX)(CX*sc); \
	VMOVUPS Y6, 192(AX)(CX*sc); \
	VMOVUPS Y7, 224(AX)(CX*sc)

// func attnScoresAVX2(q *float32, nq, D int, k *float32, kStride, nk int, s *float32)
TEXT ·attnScoresAVX2(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), SI
	MOVQ nq+8(FP), R8
	MOVQ D+16(FP), R11
	SHLQ $2, R11             // R11: bytes of a plain row
	MOVQ k+24(FP), DI
	MOVQ kStride+32(FP), R9
	SHLQ $2, R9              // R9: bytes between key rows
	MOVQ nk+40(FP), R10
	MOVQ s+48(FP), DX
	MOVQ R8, R13
	SHLQ $2, R13             // R13: bytes of one key's scores
	IMULQ R11, R8
	ADDQ SI, R8              // R8: end of the packed queries

pair:
	CMPQ R10, $2
	JLT  single
	LEAQ (DI)(R9*1), R12     // key row j+1
	MOVQ SI, AX
	MOVQ DX, BX

pairquad:
	ZERO_ACC8
	XORQ   CX, CX

pairchunk:
	VMOVUPS     (DI)(CX*1), Y8
	VMOVUPS     (R12)(CX*1), Y9
	VMOVUPS     0(AX)(CX*4), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y4
	VMOVUPS     32(AX)(CX*4), Y11
	VFMADD231PS Y8, Y11, Y1
	VFMADD231PS Y9, Y11, Y5
	VMOVUPS     64(AX)(CX*4), Y10
	VFMADD231PS Y8, Y10, Y2
	VFMADD231PS Y9, Y10, Y6
	VMOVUPS     96(AX)(CX*4), Y11
	VFMADD231PS Y8, Y11, Y3
	VFMADD231PS Y9, Y11, Y7
	ADDQ        $32, CX
	CMPQ        CX, R11
	JLT         pairchunk

	REDUCE4(Y0, Y1, Y2, Y3, X0, Y0, X12)
	VMOVUPS X0, (BX)
	REDUCE4(Y4, Y5, Y6, Y7, X4, Y4, X12)
	VMOVUPS X4, (BX)(R13*1)
	ADDQ    $16, BX
	LEAQ    (AX)(R11*4), AX
	CMPQ    AX, R8
	JLT     pairquad

	LEAQ (DI)(R9*2), DI
	LEAQ (DX)(R13*2), DX
	SUBQ $2, R10
	JMP  pair

single:
	TESTQ R10, R10
	JZ    done
	MOVQ  SI, AX
	MOVQ  DX, BX

singlequad:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   CX, CX

singlechunk:
	VMOVUPS     (DI)(CX*1), Y8
	VFMADD231PS 0(AX)(CX*4), Y8, Y0
	VFMADD231PS 32(AX)(CX*4), Y8, Y1
	VFMADD231PS 64(AX)(CX*4), Y8, Y2
	VFMADD231PS 96(AX)(CX*4), Y8, Y3
	ADDQ        $32, CX
	CMPQ        CX, R11
	JLT         singlechunk

	REDUCE4(Y0, Y1, Y2, Y3, X0, Y0, X12)
	VMOVUPS X0, (BX)
	ADDQ    $16, BX
	LEAQ    (AX)(R11*4), AX
	CMPQ    AX, R8
	JLT     singlequad

done:
	VZEROUPPER
	RET

// func attnAccumAVX2(p *float32, nq, D int, v *float32, vStride, nk int, o *float32)
// Per quad of output rows and pair of chunks, eight accumulators stay in registers while
// every key's two value chunks meet the quad's four probabilities.
TEXT ·attnAccumAVX2(SB), NOSPLIT, $0-56
	MOVQ p+0(FP), DX
	MOVQ nq+8(FP), R8
	MOVQ D+16(FP), R11
	SHLQ $2, R11             // bytes of a plain row
	MOVQ vStride+32(FP), R9
	SHLQ $2, R9
	MOVQ o+48(FP), SI
	MOVQ R8, R13
	SHLQ $2, R13             // bytes of one key's probabilities
	IMULQ R11, R8
	ADDQ SI, R8              // end of the packed output
	MOVQ SI, AX              // quad of output rows
	MOVQ DX, BX              // its probabilities of key 0

quad:
	XORQ CX, CX

chunks:
	LOAD_O8(4)
	MOVQ    v+24(FP), DI
	MOVQ    BX, R12
	MOVQ    nk+40(FP), R10

keys:
	VMOVUPS      (DI)(CX*1), Y8
	VMOVUPS      32(DI)(CX*1), Y9
	VBROADCASTSS 0(R12), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y4
	VBROADCASTSS 4(R12), Y11
	VFMADD231PS  Y8, Y11, Y1
	VFMADD231PS  Y9, Y11, Y5
	VBROADCASTSS 8(R12), Y10
	VFMADD231PS  Y8, Y10, Y2
	VFMADD231PS  Y9, Y10, Y6
	VBROADCASTSS 12(R12), Y11
	VFMADD231PS  Y8, Y11, Y3
	VFMADD231PS  Y9, Y11, Y7
	ADDQ         R9, DI
	ADDQ         R13, R12
	DECQ         R10
	JNZ          keys

	STORE_O8(4)
	ADDQ    $64, CX
	CMPQ    CX, R11
	JLT     chunks

	ADDQ $16, BX
	LEAQ (AX)(R11*4), AX
	CMPQ AX, R8
	JLT  quad
	VZEROUPPER
	RET

// func attnRowMaxAVX2(s *float32, nq, nk int, m *float32)
TEXT ·attnRowMaxAVX2(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ nq+8(FP), R8
	MOVQ nk+16(FP), R10
	MOVQ m+24(FP), DX
	MOVQ R8, R13
	SHLQ $2, R13
	XORQ CX, CX              // byte offset of 8 rows

rows8:
	VMOVUPS (DX)(CX*1), Y0
	LEAQ    (SI)(CX*1), DI
	MOVQ    R10, R12

maxkeys:
	VMAXPS (DI), Y0, Y0
	ADDQ   R13, DI
	DECQ   R12
	JNZ    maxkeys
	VMOVUPS Y0, (DX)(CX*1)
	ADDQ    $32, CX
	CMPQ    CX, R13
	JLT     rows8
	VZEROUPPER
	RET

DATA expLimit<>+0(SB)/4, $-125.0
GLOBL expLimit<>(SB), RODATA|NOPTR, $4
DATA expLn2<>+0(SB)/4, $0.6931471805599453
GLOBL expLn2<>(SB), RODATA|NOPTR, $4
DATA expOne<>+0(SB)/4, $1.0
GLOBL expOne<>(SB), RODATA|NOPTR, $4
DATA expC2<>+0(SB)/4, $0.5
GLOBL expC2<>(SB), RODATA|NOPTR, $4
DATA expC3<>+0(SB)/4, $0.16666666666666666
GLOBL expC3<>(SB), RODATA|NOPTR, $4
DATA expC4<>+0(SB)/4, $0.041666666666666664
GLOBL expC4<>(SB), RODATA|NOPTR, $4
DATA expC5<>+0(SB)/4, $0.008333333333333333
GLOBL expC5<>(SB), RODATA|NOPTR, $4
DATA expC6<>+0(SB)/4, $0.001388888888888889
GLOBL expC6<>(SB), RODATA|NOPTR, $4
DATA expBias<>+0(SB)/4, $127
GLOBL expBias<>(SB), RODATA|NOPTR, $4

// func attnExp2SumAVX2(s *float32, nq, nk int, m, l *float32)
// s[j*nq+i] = 2^(s[j*nq+i] - m[i]) as exp2f computes it (0 below -125), l[i] += it.
TEXT ·attnExp2SumAVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ nq+8(FP), R8
	MOVQ nk+16(FP), R10
	MOVQ m+24(FP), DX
	MOVQ l+32(FP), BX
	MOVQ R8, R13
	SHLQ $2, R13
	VBROADCASTSS expLimit<>(SB), Y8
	VBROADCASTSS expLn2<>(SB), Y9
	VBROADCASTSS expOne<>(SB), Y10
	VBROADCASTSS expC6<>(SB), Y11
	VBROADCASTSS expC5<>(SB), Y12
	VBROADCASTSS expC4<>(SB), Y13
	VBROADCASTSS expC3<>(SB), Y14
	VPBROADCASTD expBias<>(SB), Y7
	XORQ CX, CX

erows8:
	VMOVUPS (DX)(CX*1), Y0   // m
	VMOVUPS (BX)(CX*1), Y6   // l
	LEAQ    (SI)(CX*1), DI
	MOVQ    R10, R12

ekeys:
	VMOVUPS     (DI), Y1
	VSUBPS      Y0, Y1, Y1          // x = s - m
	VROUNDPS    $0, Y1, Y3          // n
	VSUBPS      Y3, Y1, Y4
	VMULPS      Y9, Y4, Y4          // f = (x - n)·ln2
	VCMPPS      $1, Y8, Y1, Y1      // x < -125: masked
	VMOVAPS     Y11, Y5
	VFMADD213PS Y12, Y4, Y5         // p = p·f + c5
	VFMADD213PS Y13, Y4, Y5
	VFMADD213PS Y14, Y4, Y5
	VBROADCASTSS expC2<>(SB), Y2
	VFMADD213PS Y2, Y4, Y5
	VFMADD213PS Y10, Y4, Y5         // + 1
	VFMADD213PS Y10, Y4, Y5         // + 1: e^f
	VCVTPS2DQ   Y3, Y3
	VPADDD      Y7, Y3, Y3
	VPSLLD      $23, Y3, Y3         // 2^n
	VMULPS      Y3, Y5, Y5
	VANDNPS     Y5, Y1, Y5
	VMOVUPS     Y5, (DI)
	VADDPS      Y5, Y6, Y6
	ADDQ        R13, DI
	DECQ        R12
	JNZ         ekeys
	VMOVUPS Y6, (BX)(CX*1)
	ADDQ    $32, CX
	CMPQ    CX, R13
	JLT     erows8
	VZEROUPPER
	RET

// func attnPrefetchRows(p uintptr, stride, n, D int)
// PREFETCHT0 for every cache line of n rows of D floats, stride floats apart: the value
// rows of a key block, asked for while the block's scores are computed, so the value pass
// (which walks each 64-byte strip of the rows across all the block's keys) finds them in
// the cache instead of waiting on one row's line after another.
TEXT ·attnPrefetchRows(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), R9
	SHLQ $2, R9
	MOVQ n+16(FP), R10
	MOVQ D+24(FP), R11
	SHLQ $2, R11

prow:
	XORQ CX, CX

pline:
	PREFETCHT0 (SI)(CX*1)
	ADDQ       $64, CX
	CMPQ       CX, R11
	JLT        pline
	ADDQ       R9, SI
	DECQ       R10
	JNZ        prow
	RET

// The bf16 kernels read the cache's rows in place, q and o in pair order
// (attention_tiled.go): 32 bytes of a row hold 16 dims as 8 words of two bf16, even dim
// low; VPSLLD $16 makes the even dims float32 (chunk 2c of the packed rows) and a mask of
// the high halves the odd ones (chunk 2c+1). CX walks the bf16 row (32 bytes a step), so
// the packed rows' chunks 2c and 2c+1 are at (AX)(CX*8) and 128(AX)(CX*8); R11 is the
// bf16 row's bytes, and a quad of packed rows 8 R11.
DATA bf16High<>+0(SB)/4, $0xffff0000
GLOBL bf16High<>(SB), RODATA|NOPTR, $4

// func attnScoresBF16AVX2(q *float32, nq, D int, k *uint16, kStride, nk int, s *float32)
TEXT ·attnScoresBF16AVX2(SB), NOSPLIT, $0-56
	MOVQ         q+0(FP), SI
	MOVQ         nq+8(FP), R8
	MOVQ         D+16(FP), R11
	SHLQ         $1, R11        // R11: bytes of a bf16 row
	MOVQ         k+24(FP), DI
	MOVQ         kStride+32(FP), R9
	SHLQ         $1, R9         // R9: bytes between key rows
	MOVQ         nk+40(FP), R10
	MOVQ         s+48(FP), DX
	MOVQ         R8, R13
	SHLQ         $2, R13        // R13: bytes of one key's scores
	IMULQ        R11, R8
	SHLQ         $1, R8
	ADDQ         SI, R8         // R8: end of the packed queries
	VPBROADCASTD bf16High<>(SB), Y13

bpair:
	CMPQ R10, $2
	JLT  bsingle
	LEAQ (DI)(R9*1), R12        // key row j+1
	MOVQ SI, AX
	MOVQ DX, BX

bpairquad:
	ZERO_ACC8
	XORQ   CX, CX

bpairchunk:
	VMOVDQU     (DI)(CX*1), Y8
	VMOVDQU     (R12)(CX*1), Y10
	VPAND       Y13, Y8, Y9     // key j's odd dims
	VPSLLD      $16, Y8, Y8     // and even ones
	VPAND       Y13, Y10, Y11
	VPSLLD      $16, Y10, Y10
	VMOVUPS     0(AX)(CX*8), Y12
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y10, Y12, Y4
	VMOVUPS     32(AX)(CX*8), Y12
	VFMADD231PS Y8, Y12, Y1
	VFMADD231PS Y10, Y12, Y5
	VMOVUPS     64(AX)(CX*8), Y12
	VFMADD231PS Y8, Y12, Y2
	VFMADD231PS Y10, Y12, Y6
	VMOVUPS     96(AX)(CX*8), Y12
	VFMADD231PS Y8, Y12, Y3
	VFMADD231PS Y10, Y12, Y7
	VMOVUPS     128(AX)(CX*8), Y12
	VFMADD231PS Y9, Y12, Y0
	VFMADD231PS Y11, Y12, Y4
	VMOVUPS     160(AX)(CX*8), Y12
	VFMADD231PS Y9, Y12, Y1
	VFMADD231PS Y11, Y12, Y5
	VMOVUPS     192(AX)(CX*8), Y12
	VFMADD231PS Y9, Y12, Y2
	VFMADD231PS Y11, Y12, Y6
	VMOVUPS     224(AX)(CX*8), Y12
	VFMADD231PS Y9, Y12, Y3
	VFMADD231PS Y11, Y12, Y7
	ADDQ        $32, CX
	CMPQ        CX, R11
	JLT         bpairchunk

	REDUCE4(Y0, Y1, Y2, Y3, X0, Y0, X12)
	VMOVUPS X0, (BX)
	REDUCE4(Y4, Y5, Y6, Y7, X4, Y4, X12)
	VMOVUPS X4, (BX)(R13*1)
	ADDQ    $16, BX
	LEAQ    (AX)(R11*8), AX
	CMPQ    AX, R8
	JLT     bpairquad

	LEAQ (DI)(R9*2), DI
	LEAQ (DX)(R13*2), DX
	SUBQ $2, R10
	JMP  bpair

bsingle:
	TESTQ R10, R10
	JZ    bdone
	MOVQ  SI, AX
	MOVQ  DX, BX

bsinglequad:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   CX, CX

bsinglechunk:
	VMOVDQU     (DI)(CX*1), Y8
	VPAND       Y13, Y8, Y9
	VPSLLD      $16, Y8, Y8
	VFMADD231PS 0(AX)(CX*8), Y8, Y0
	VFMADD231PS 32(AX)(CX*8), Y8, Y1
	VFMADD231PS 64(AX)(CX*8), Y8, Y2
	VFMADD231PS 96(AX)(CX*8), Y8, Y3
	VFMADD231PS 128(AX)(CX*8), Y9, Y0
	VFMADD231PS 160(AX)(CX*8), Y9, Y1
	VFMADD231PS 192(AX)(CX*8), Y9, Y2
	VFMADD231PS 224(AX)(CX*8), Y9, Y3
	ADDQ        $32, CX
	CMPQ        CX, R11
	JLT         bsinglechunk

	REDUCE4(Y0, Y1, Y2, Y3, X0, Y0, X12)
	VMOVUPS X0, (BX)
	ADDQ    $16, BX
	LEAQ    (AX)(R11*8), AX
	CMPQ    AX, R8
	JLT     bsinglequad

bdone:
	VZEROUPPER
	RET

// func attnAccumBF16AVX2(p *float32, nq, D int, v *uint16, vStride, nk int, o *float32)
// attnAccumAVX2 with each key's 16 dims of a step read as bf16: its even dims are chunk
// 2c, its odd ones chunk 2c+1, the pair of chunks the float32 kernel takes a step.
TEXT ·attnAccumBF16AVX2(SB), NOSPLIT, $0-56
	MOVQ         p+0(FP), DX
	MOVQ         nq+8(FP), R8
	MOVQ         D+16(FP), R11
	SHLQ         $1, R11        // bytes of a bf16 row
	MOVQ         vStride+32(FP), R9
	SHLQ         $1, R9
	MOVQ         o+48(FP), SI
	MOVQ         R8, R13
	SHLQ         $2, R13        // bytes of one key's probabilities
	IMULQ        R11, R8
	SHLQ         $1, R8
	ADDQ         SI, R8         // end of the packed output
	MOVQ         SI, AX         // quad of output rows
	MOVQ         DX, BX         // its probabilities of key 0
	VPBROADCASTD bf16High<>(SB), Y13

bquad:
	XORQ CX, CX

bchunks:
	LOAD_O8(8)
	MOVQ    v+24(FP), DI
	MOVQ    BX, R12
	MOVQ    nk+40(FP), R10

bkeys:
	VMOVDQU      (DI)(CX*1), Y8
	VPAND        Y13, Y8, Y9
	VPSLLD       $16, Y8, Y8
	VBROADCASTSS 0(R12), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y4
	VBROADCASTSS 4(R12), Y11
	VFMADD231PS  Y8, Y11, Y1
	VFMADD231PS  Y9, Y11, Y5
	VBROADCASTSS 8(R12), Y10
	VFMADD231PS  Y8, Y10, Y2
	VFMADD231PS  Y9, Y10, Y6
	VBROADCASTSS 12(R12), Y11
	VFMADD231PS  Y8, Y11, Y3
	VFMADD231PS  Y9, Y11, Y7
	ADDQ         R9, DI
	ADDQ         R13, R12
	DECQ         R10
	JNZ          bkeys

	STORE_O8(8)
	ADDQ    $32, CX
	CMPQ    CX, R11
	JLT     bchunks

	ADDQ $16, BX
	LEAQ (AX)(R11*8), AX
	CMPQ AX, R8
	JLT  bquad
	VZEROUPPER
	RET
