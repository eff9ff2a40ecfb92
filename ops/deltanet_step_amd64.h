// The gated delta step's body (deltanet_amd64.s), over tiles of four vector registers of
// state columns: included once per register width, with, defined before:
//   GDN_STEP    the function's symbol;
//   V0..V14     the vector registers (Y or Z);
//   VZERO(r)    zeroes register r;
//   GDN_B1..B3  byte offsets of the tile's second to fourth registers (one, two and three
//               registers' bytes) and GDN_TILE the tile's bytes.
// Arguments: S *float32, Dk, Dv int, decay, beta float32, q, k, v, o *float32.
TEXT GDN_STEP(SB), NOSPLIT, $0-64
	MOVQ         S+0(FP), DX
	MOVQ         Dk+8(FP), R8
	MOVQ         Dv+16(FP), R11
	SHLQ         $2, R11         // bytes of a state row
	VBROADCASTSS decay+24(FP), V12
	VBROADCASTSS beta+28(FP), V13
	MOVQ         q+32(FP), R9
	MOVQ         k+40(FP), R10
	MOVQ         v+48(FP), R12
	MOVQ         o+56(FP), R13
	XORQ         CX, CX          // byte offset of the column tile

tile:
	VZERO(V0)
	VZERO(V1)
	VZERO(V2)
	VZERO(V3)
	LEAQ (DX)(CX*1), SI
	MOVQ R10, DI
	MOVQ R8, BX

retrieve:
	// mem += k_i·(decay·S_i); the decayed row is not stored (pass 2 makes it again).
	VMULPS       0(SI), V12, V4
	VMULPS       GDN_B1(SI), V12, V5
	VMULPS       GDN_B2(SI), V12, V6
	VMULPS       GDN_B3(SI), V12, V7
	VBROADCASTSS (DI), V8
	VFMADD231PS  V4, V8, V0
	VFMADD231PS  V5, V8, V1
	VFMADD231PS  V6, V8, V2
	VFMADD231PS  V7, V8, V3
	ADDQ         R11, SI
	ADDQ         $4, DI
	DECQ         BX
	JNZ          retrieve

	// δ = beta·(v − mem)
	VMOVUPS 0(R12)(CX*1), V4
	VMOVUPS GDN_B1(R12)(CX*1), V5
	VMOVUPS GDN_B2(R12)(CX*1), V6
	VMOVUPS GDN_B3(R12)(CX*1), V7
	VSUBPS  V0, V4, V0
	VSUBPS  V1, V5, V1
	VSUBPS  V2, V6, V2
	VSUBPS  V3, V7, V3
	VMULPS  V13, V0, V0
	VMULPS  V13, V1, V1
	VMULPS  V13, V2, V2
	VMULPS  V13, V3, V3

	VZERO(V8)
	VZERO(V9)
	VZERO(V10)
	VZERO(V11)
	LEAQ (DX)(CX*1), SI
	MOVQ R10, DI
	MOVQ R9, AX
	MOVQ R8, BX

update:
	// S_i ← decay·S_i + k_i·δ, o += q_i·S_i
	VMULPS       0(SI), V12, V4
	VMULPS       GDN_B1(SI), V12, V5
	VMULPS       GDN_B2(SI), V12, V6
	VMULPS       GDN_B3(SI), V12, V7
	VBROADCASTSS (DI), V14
	VFMADD231PS  V0, V14, V4
	VFMADD231PS  V1, V14, V5
	VFMADD231PS  V2, V14, V6
	VFMADD231PS  V3, V14, V7
	VMOVUPS      V4, 0(SI)
	VMOVUPS      V5, GDN_B1(SI)
	VMOVUPS      V6, GDN_B2(SI)
	VMOVUPS      V7, GDN_B3(SI)
	VBROADCASTSS (AX), V14
	VFMADD231PS  V4, V14, V8
	VFMADD231PS  V5, V14, V9
	VFMADD231PS  V6, V14, V10
	VFMADD231PS  V7, V14, V11
	ADDQ         R11, SI
	ADDQ         $4, DI
	ADDQ         $4, AX
	DECQ         BX
	JNZ          update

	VMOVUPS V8, 0(R13)(CX*1)
	VMOVUPS V9, GDN_B1(R13)(CX*1)
	VMOVUPS V10, GDN_B2(R13)(CX*1)
	VMOVUPS V11, GDN_B3(R13)(CX*1)
	ADDQ    $GDN_TILE, CX
	CMPQ    CX, R11
	JLT     tile
	VZEROUPPER
	RET
