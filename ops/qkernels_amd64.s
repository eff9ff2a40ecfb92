// AVX2/FMA kernels of the quantized row dots (see qkernels.go and qkernels_amd64.go).
// q4 unpacks 8 bytes at a time into the 8 low nibbles (even elements) and the 8 high
// nibbles (odd elements), which is why q4 activations arrive interleaved (the 8 even then
// the 8 odd elements of each 16); q8 reads its bytes in order. The decode kernels (dot1)
// step 32 codes at a time, the four-row ones (dot4) 16. Per group the
// codes are multiplied with x in float32 and the group total is scaled once; the bias
// term Σ_g b_g·Σx_g uses the precomputed group sums of x.

#include "textflag.h"

// Go's ABIInternal keeps R14 (g) and X15 (zero) fixed across calls into assembly, so
// these kernels leave both alone.

DATA nibbleMask<>+0(SB)/4, $0x0000000f
GLOBL nibbleMask<>(SB), RODATA|NOPTR, $4

DATA nibbleMask8<>+0(SB)/8, $0x0000000f0000000f
DATA nibbleMask8<>+8(SB)/8, $0x0000000f0000000f
DATA nibbleMask8<>+16(SB)/8, $0x0000000f0000000f
DATA nibbleMask8<>+24(SB)/8, $0x0000000f0000000f
GLOBL nibbleMask8<>(SB), RODATA|NOPTR, $32

// bf16 loads the bf16 at ptr as a float32 into the low lane of xmm (through AX).
#define BF16(ptr, xmm) MOVWLZX ptr, AX; SHLL $16, AX; VMOVD AX, xmm

// BIASDOT adds Σ_g b_g·xsum_g over CX groups (biases at R9, xsum at R11) to X0, eight
// groups at a time, then one at a time. Uses Y1, Y7, X9.
#define BIASDOT(vec, tail, done) \
	VXORPS       Y1, Y1, Y1; \
	VXORPS       X9, X9, X9; \
	CMPQ         CX, $8; \
	JLT          tail; \
vec: \
	VPMOVZXWD    (R9), Y7; \
	VPSLLD       $16, Y7, Y7; \
	VFMADD231PS  (R11), Y7, Y1; \
	ADDQ         $16, R9; \
	ADDQ         $32, R11; \
	SUBQ         $8, CX; \
	CMPQ         CX, $8; \
	JGE          vec; \
tail: \
	TESTQ        CX, CX; \
	JZ           done; \
	BF16((R9), X7); \
	VFMADD231SS  (R11), X7, X9; \
	ADDQ         $2, R9; \
	ADDQ         $4, R11; \
	DECQ         CX; \
	JMP          tail; \
done: \
	VEXTRACTF128 $1, Y1, X7; \
	VADDPS       X7, X1, X1; \
	VHADDPS      X1, X1, X1; \
	VHADDPS      X1, X1, X1; \
	VADDSS       X1, X0, X0; \
	VADDSS       X9, X0, X0

// SCALEGROUP broadcasts the group's scale (bf16 at R8) into Y6 as float32.
#define SCALEGROUP \
	VPBROADCASTW (R8), Y6; \
	VPSLLD       $16, Y6, Y6

// func q4Dot1AVX2(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32
// units is group/32: each step takes 16 bytes (32 codes).
TEXT ·q4Dot1AVX2(SB), NOSPLIT, $0-60
	MOVQ         codes+0(FP), SI
	MOVQ         scales+8(FP), R8
	MOVQ         biases+16(FP), R9
	MOVQ         groups+24(FP), CX
	MOVQ         units+32(FP), R10
	MOVQ         x+40(FP), DI
	MOVQ         xsum+48(FP), R11
	VPBROADCASTD nibbleMask<>(SB), Y8
	VXORPS       Y0, Y0, Y0 // Σ_g s_g·(Σ q·x)_g, 8 lanes
	MOVQ         CX, BX

q4d1group:
	PREFETCHT0 8192(SI) // the weights stream from memory: ask ahead
	VXORPS     Y2, Y2, Y2 // even elements of the group
	VXORPS     Y3, Y3, Y3 // odd elements
	MOVQ       R10, DX

q4d1unit:
	VPMOVZXBD   (SI), Y4
	VPMOVZXBD   8(SI), Y10
	VPSRLD      $4, Y4, Y5
	VPSRLD      $4, Y10, Y11
	VPAND       Y8, Y4, Y4
	VPAND       Y8, Y10, Y10
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VCVTDQ2PS   Y10, Y10
	VCVTDQ2PS   Y11, Y11
	VFMADD231PS (DI), Y4, Y2
	VFMADD231PS 32(DI), Y5, Y3
	VFMADD231PS 64(DI), Y10, Y2
	VFMADD231PS 96(DI), Y11, Y3
	ADDQ        $16, SI
	ADDQ        $128, DI
	DECQ        DX
	JNZ         q4d1unit

	VADDPS      Y3, Y2, Y2
	SCALEGROUP
	VFMADD231PS Y6, Y2, Y0
	ADDQ        $2, R8
	DECQ        BX
	JNZ         q4d1group

	VEXTRACTF128 $1, Y0, X2
	VADDPS       X2, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	BIASDOT(q4d1bvec, q4d1btail, q4d1bdone)
	VZEROUPPER
	MOVSS        X0, ret+56(FP)
	RET

// func q8Dot1AVX2(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32
// units is group/32: each step takes 32 bytes.
TEXT ·q8Dot1AVX2(SB), NOSPLIT, $0-60
	MOVQ   codes+0(FP), SI
	MOVQ   scales+8(FP), R8
	MOVQ   biases+16(FP), R9
	MOVQ   groups+24(FP), CX
	MOVQ   units+32(FP), R10
	MOVQ   x+40(FP), DI
	MOVQ   xsum+48(FP), R11
	VXORPS Y0, Y0, Y0
	MOVQ   CX, BX

q8d1group:
	PREFETCHT0 8192(SI)
	VXORPS     Y2, Y2, Y2
	VXORPS     Y3, Y3, Y3
	MOVQ       R10, DX

q8d1unit:
	VPMOVZXBD   (SI), Y4
	VPMOVZXBD   8(SI), Y5
	VPMOVZXBD   16(SI), Y10
	VPMOVZXBD   24(SI), Y11
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VCVTDQ2PS   Y10, Y10
	VCVTDQ2PS   Y11, Y11
	VFMADD231PS (DI), Y4, Y2
	VFMADD231PS 32(DI), Y5, Y3
	VFMADD231PS 64(DI), Y10, Y2
	VFMADD231PS 96(DI), Y11, Y3
	ADDQ        $32, SI
	ADDQ        $128, DI
	DECQ        DX
	JNZ         q8d1unit

	VADDPS      Y3, Y2, Y2
	SCALEGROUP
	VFMADD231PS Y6, Y2, Y0
	ADDQ        $2, R8
	DECQ        BX
	JNZ         q8d1group

	VEXTRACTF128 $1, Y0, X2
	VADDPS       X2, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	BIASDOT(q8d1bvec, q8d1btail, q8d1bdone)
	VZEROUPPER
	MOVSS        X0, ret+56(FP)
	RET

// dot4Tail sums the row accumulators Y8..Y11 into X8 = [r0 r1 r2 r3], adds the bias
// terms Σ_g b_g·xsum4[g][p] (biases at R9, xsum4 at R11, CX groups) and stores X8 at R13.
#define DOT4TAIL(name) \
	VHADDPS      Y9, Y8, Y8; \
	VHADDPS      Y11, Y10, Y10; \
	VHADDPS      Y10, Y8, Y8; \
	VEXTRACTF128 $1, Y8, X9; \
	VADDPS       X9, X8, X8; \
name: \
	BF16((R9), X7); \
	VBROADCASTSS X7, X7; \
	VFMADD231PS  (R11), X7, X8; \
	ADDQ         $2, R9; \
	ADDQ         $16, R11; \
	DECQ         CX; \
	JNZ          name; \
	VMOVUPS      X8, (R13); \
	VZEROUPPER; \
	RET

// func q4Dot4AVX2(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)
// xStride is in bytes.
TEXT ·q4Dot4AVX2(SB), NOSPLIT, $0-72
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ groups+24(FP), CX
	MOVQ units+32(FP), R10
	MOVQ x+40(FP), DI
	MOVQ xStride+48(FP), BX
	MOVQ xsum4+56(FP), R11
	MOVQ out+64(FP), R13
	LEAQ (DI)(BX*2), R12
	ADDQ BX, R12 // row 3
	VXORPS Y8, Y8, Y8   // row accumulators
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

q4d4group:
	VXORPS Y0, Y0, Y0 // per row p: Y(2p) even, Y(2p+1) odd elements of the group
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ   R10, DX

q4d4unit:
	VPMOVZXBD   (SI), Y12
	VPSRLD      $4, Y12, Y13
	VPAND       nibbleMask8<>(SB), Y12, Y12
	VCVTDQ2PS   Y12, Y12
	VCVTDQ2PS   Y13, Y13
	VFMADD231PS (DI), Y12, Y0
	VFMADD231PS 32(DI), Y13, Y1
	VFMADD231PS (DI)(BX*1), Y12, Y2
	VFMADD231PS 32(DI)(BX*1), Y13, Y3
	VFMADD231PS (DI)(BX*2), Y12, Y4
	VFMADD231PS 32(DI)(BX*2), Y13, Y5
	VFMADD231PS (R12), Y12, Y6
	VFMADD231PS 32(R12), Y13, Y7
	ADDQ        $8, SI
	ADDQ        $64, DI
	ADDQ        $64, R12
	DECQ        DX
	JNZ         q4d4unit

	BF16((R8), X14)
	VBROADCASTSS X14, Y14
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VFMADD231PS  Y14, Y0, Y8
	VFMADD231PS  Y14, Y2, Y9
	VFMADD231PS  Y14, Y4, Y10
	VFMADD231PS  Y14, Y6, Y11
	ADDQ         $2, R8
	DECQ         CX
	JNZ          q4d4group
	MOVQ         groups+24(FP), CX
	DOT4TAIL(q4d4bias)

// func q8Dot4AVX2(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)
TEXT ·q8Dot4AVX2(SB), NOSPLIT, $0-72
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ biases+16(FP), R9
	MOVQ groups+24(FP), CX
	MOVQ units+32(FP), R10
	MOVQ x+40(FP), DI
	MOVQ xStride+48(FP), BX
	MOVQ xsum4+56(FP), R11
	MOVQ out+64(FP), R13
	LEAQ (DI)(BX*2), R12
	ADDQ BX, R12
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

q8d4group:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ   R10, DX

q8d4unit:
	VPMOVZXBD   (SI), Y12
	VPMOVZXBD   8(SI), Y13
	VCVTDQ2PS   Y12, Y12
	VCVTDQ2PS   Y13, Y13
	VFMADD231PS (DI), Y12, Y0
	VFMADD231PS 32(DI), Y13, Y1
	VFMADD231PS (DI)(BX*1), Y12, Y2
	VFMADD231PS 32(DI)(BX*1), Y13, Y3
	VFMADD231PS (DI)(BX*2), Y12, Y4
	VFMADD231PS 32(DI)(BX*2), Y13, Y5
	VFMADD231PS (R12), Y12, Y6
	VFMADD231PS 32(R12), Y13, Y6
	ADDQ        $16, SI
	ADDQ        $64, DI
	ADDQ        $64, R12
	DECQ        DX
	JNZ         q8d4unit

	BF16((R8), X14)
	VBROADCASTSS X14, Y14
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VFMADD231PS  Y14, Y0, Y8
	VFMADD231PS  Y14, Y2, Y9
	VFMADD231PS  Y14, Y4, Y10
	VFMADD231PS  Y14, Y6, Y11
	ADDQ         $2, R8
	DECQ         CX
	JNZ          q8d4group
	MOVQ         groups+24(FP), CX
	DOT4TAIL(q8d4bias)
