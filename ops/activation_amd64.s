// AVX-512 SiLU (activation.go): siluF32 sixteen lanes at a time, the same steps as the Go
// one: e = 2^(-|x|·log2 e) by rounding the exponent to an integer n and a degree-6
// polynomial of the rest (FMAs here, so the last bit may differ from the Go loop), 0 where
// the exponent is below -125, then sigmoid = (x >= 0 ? 1 : e) / (1 + e) with a true
// division, times x, times u where there is one. X15 and R14 are left alone.

#include "textflag.h"

DATA siluConst<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA siluConst<>+4(SB)/4, $0xbfb8aa3b  // -log2 e
DATA siluConst<>+8(SB)/4, $0xc2fa0000  // -125
DATA siluConst<>+12(SB)/4, $0x3f317218 // ln 2
DATA siluConst<>+16(SB)/4, $0x3f800000 // 1
DATA siluConst<>+20(SB)/4, $0x3f000000 // 1/2
DATA siluConst<>+24(SB)/4, $0x3e2aaaab // 1/6
DATA siluConst<>+28(SB)/4, $0x3d2aaaab // 1/24
DATA siluConst<>+32(SB)/4, $0x3c088889 // 1/120
DATA siluConst<>+36(SB)/4, $0x3ab60b61 // 1/720
DATA siluConst<>+40(SB)/4, $0x0000007f // exponent bias
GLOBL siluConst<>(SB), RODATA|NOPTR, $44

// func siluMulAVX512(y, gate, up *float32, n int)
// y[i] = silu(gate[i]) · up[i] for i < n (n a multiple of 16); up == nil: y[i] = silu(gate[i]).
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JZ   done

	VBROADCASTSS siluConst<>+0(SB), Z16
	VBROADCASTSS siluConst<>+4(SB), Z17
	VBROADCASTSS siluConst<>+8(SB), Z18
	VBROADCASTSS siluConst<>+12(SB), Z19
	VBROADCASTSS siluConst<>+16(SB), Z20
	VBROADCASTSS siluConst<>+20(SB), Z21
	VBROADCASTSS siluConst<>+24(SB), Z22
	VBROADCASTSS siluConst<>+28(SB), Z23
	VBROADCASTSS siluConst<>+32(SB), Z24
	VBROADCASTSS siluConst<>+36(SB), Z25
	VPBROADCASTD siluConst<>+40(SB), Z26
	VPXORD       Z27, Z27, Z27

loop:
	VMOVUPS      (SI), Z0               // x
	VANDPS       Z16, Z0, Z1
	VMULPS       Z17, Z1, Z1            // a = -|x|·log2 e <= 0
	VCMPPS       $0x1d, Z18, Z1, K1     // a >= -125 (else e = 0)
	VCMPPS       $0x1d, Z27, Z0, K2     // x >= 0
	VRNDSCALEPS  $0, Z1, Z2             // n = round(a)
	VSUBPS       Z2, Z1, Z3
	VMULPS       Z19, Z3, Z3            // f = (a - n)·ln 2
	VMOVAPS      Z25, Z4                // p = e^f, Horner from 1/720
	VFMADD213PS  Z24, Z3, Z4
	VFMADD213PS  Z23, Z3, Z4
	VFMADD213PS  Z22, Z3, Z4
	VFMADD213PS  Z21, Z3, Z4
	VFMADD213PS  Z20, Z3, Z4
	VFMADD213PS  Z20, Z3, Z4
	VCVTPS2DQ    Z2, Z5
	VPADDD       Z26, Z5, Z5
	VPSLLD       $23, Z5, Z5            // 2^n
	VMULPS.Z     Z5, Z4, K1, Z6         // e
	VADDPS       Z20, Z6, Z7            // 1 + e
	VBLENDMPS    Z20, Z6, K2, Z8        // x >= 0 ? 1 : e
	VDIVPS       Z7, Z8, Z8             // sigmoid(x)
	VMULPS       Z8, Z0, Z0             // silu(x)
	TESTQ        DX, DX
	JZ           store
	VMULPS       (DX), Z0, Z0
	ADDQ         $64, DX

store:
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET

// The AVX2 SiLU: siluMulAVX512's steps eight lanes at a time, for machines without AVX-512
// (compare masks ANDed and blended in place of mask registers, VROUNDPS for VRNDSCALEPS).
// The constants are eight lanes each (siluConst's values, 32 bytes apart), read as memory
// operands: sixteen YMM registers cannot hold them beside the temporaries.
DATA siluConst8<>+0(SB)/8, $0x7fffffff7fffffff // |x| mask
DATA siluConst8<>+8(SB)/8, $0x7fffffff7fffffff
DATA siluConst8<>+16(SB)/8, $0x7fffffff7fffffff
DATA siluConst8<>+24(SB)/8, $0x7fffffff7fffffff
DATA siluConst8<>+32(SB)/8, $0xbfb8aa3bbfb8aa3b // -log2 e
DATA siluConst8<>+40(SB)/8, $0xbfb8aa3bbfb8aa3b
DATA siluConst8<>+48(SB)/8, $0xbfb8aa3bbfb8aa3b
DATA siluConst8<>+56(SB)/8, $0xbfb8aa3bbfb8aa3b
DATA siluConst8<>+64(SB)/8, $0xc2fa0000c2fa0000 // -125
DATA siluConst8<>+72(SB)/8, $0xc2fa0000c2fa0000
DATA siluConst8<>+80(SB)/8, $0xc2fa0000c2fa0000
DATA siluConst8<>+88(SB)/8, $0xc2fa0000c2fa0000
DATA siluConst8<>+96(SB)/8, $0x3f3172183f317218 // ln 2
DATA siluConst8<>+104(SB)/8, $0x3f3172183f317218
DATA siluConst8<>+112(SB)/8, $0x3f3172183f317218
DATA siluConst8<>+120(SB)/8, $0x3f3172183f317218
DATA siluConst8<>+128(SB)/8, $0x3f8000003f800000 // 1
DATA siluConst8<>+136(SB)/8, $0x3f8000003f800000
DATA siluConst8<>+144(SB)/8, $0x3f8000003f800000
DATA siluConst8<>+152(SB)/8, $0x3f8000003f800000
DATA siluConst8<>+160(SB)/8, $0x3f0000003f000000 // 1/2
DATA siluConst8<>+168(SB)/8, $0x3f0000003f000000
DATA siluConst8<>+176(SB)/8, $0x3f0000003f000000
DATA siluConst8<>+184(SB)/8, $0x3f0000003f000000
DATA siluConst8<>+192(SB)/8, $0x3e2aaaab3e2aaaab // 1/6
DATA siluConst8<>+200(SB)/8, $0x3e2aaaab3e2aaaab
DATA siluConst8<>+208(SB)/8, $0x3e2aaaab3e2aaaab
DATA siluConst8<>+216(SB)/8, $0x3e2aaaab3e2aaaab
DATA siluConst8<>+224(SB)/8, $0x3d2aaaab3d2aaaab // 1/24
DATA siluConst8<>+232(SB)/8, $0x3d2aaaab3d2aaaab
DATA siluConst8<>+240(SB)/8, $0x3d2aaaab3d2aaaab
DATA siluConst8<>+248(SB)/8, $0x3d2aaaab3d2aaaab
DATA siluConst8<>+256(SB)/8, $0x3c0888893c088889 // 1/120
DATA siluConst8<>+264(SB)/8, $0x3c0888893c088889
DATA siluConst8<>+272(SB)/8, $0x3c0888893c088889
DATA siluConst8<>+280(SB)/8, $0x3c0888893c088889
DATA siluConst8<>+288(SB)/8, $0x3ab60b613ab60b61 // 1/720
DATA siluConst8<>+296(SB)/8, $0x3ab60b613ab60b61
DATA siluConst8<>+304(SB)/8, $0x3ab60b613ab60b61
DATA siluConst8<>+312(SB)/8, $0x3ab60b613ab60b61
DATA siluConst8<>+320(SB)/8, $0x0000007f0000007f // exponent bias
DATA siluConst8<>+328(SB)/8, $0x0000007f0000007f
DATA siluConst8<>+336(SB)/8, $0x0000007f0000007f
DATA siluConst8<>+344(SB)/8, $0x0000007f0000007f
GLOBL siluConst8<>(SB), RODATA|NOPTR, $352

// func siluMulAVX2(y, gate, up *float32, n int)
// y[i] = silu(gate[i]) · up[i] for i < n (n a multiple of 8); up == nil: y[i] = silu(gate[i]).
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   avx2done

	VMOVUPS siluConst8<>+0(SB), Y8    // |x| mask
	VMOVUPS siluConst8<>+32(SB), Y9   // -log2 e
	VMOVUPS siluConst8<>+128(SB), Y10 // 1
	VXORPS  Y11, Y11, Y11

avx2loop:
	VMOVUPS     (SI), Y0                       // x
	VANDPS      Y8, Y0, Y1
	VMULPS      Y9, Y1, Y1                     // a = -|x|·log2 e <= 0
	VCMPPS      $0x1d, siluConst8<>+64(SB), Y1, Y6 // a >= -125 (else e = 0)
	VCMPPS      $0x1d, Y11, Y0, Y7             // x >= 0
	VROUNDPS    $0, Y1, Y2                     // n = round(a)
	VSUBPS      Y2, Y1, Y3
	VMULPS      siluConst8<>+96(SB), Y3, Y3    // f = (a - n)·ln 2
	VMOVUPS     siluConst8<>+288(SB), Y4       // p = e^f, Horner from 1/720
	VFMADD213PS siluConst8<>+256(SB), Y3, Y4
	VFMADD213PS siluConst8<>+224(SB), Y3, Y4
	VFMADD213PS siluConst8<>+192(SB), Y3, Y4
	VFMADD213PS siluConst8<>+160(SB), Y3, Y4
	VFMADD213PS Y10, Y3, Y4
	VFMADD213PS Y10, Y3, Y4
	VCVTPS2DQ   Y2, Y5
	VPADDD      siluConst8<>+320(SB), Y5, Y5
	VPSLLD      $23, Y5, Y5                    // 2^n
	VMULPS      Y5, Y4, Y4
	VANDPS      Y6, Y4, Y4                     // e
	VADDPS      Y10, Y4, Y5                    // 1 + e
	VBLENDVPS   Y7, Y10, Y4, Y6                // x >= 0 ? 1 : e
	VDIVPS      Y5, Y6, Y6                     // sigmoid(x)
	VMULPS      Y6, Y0, Y0                     // silu(x)
	TESTQ       DX, DX
	JZ          avx2store
	VMULPS      (DX), Y0, Y0
	ADDQ        $32, DX

avx2store:
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     avx2loop

avx2done:
	VZEROUPPER
	RET
