package ops

import "golang.org/x/sys/cpu"

//go:noescape
func q4Int16Dot1VNNI(codes *byte, scales, biases *uint16, groups, rows int, acts *byte, sx, xsum *float32, out *float32, ahead int)

//go:noescape
func q4Int16Dot1AVX2Asm(codes *byte, scales, biases *uint16, groups, rows int, acts *byte, sx, xsum *float32, out *float32, ahead int)

// q4Int16Dot1AVX512 is the one-row int16 kernel (qmatmul_int16_amd64.s) behind the length
// checks: decode under activations = "int16".
func q4Int16Dot1AVX512(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32) {
	checkInt16RowCall(codes, scales, biases, groups, acts, out)
	sx, xsum := int16Tables(acts, groups)
	q4Int16Dot1VNNI(&codes[0], &scales[0], &biases[0], groups, len(out), &acts[0], &sx[0], &xsum[0], &out[0], int8RowAhead)
}

// q4Int16Dot1AVX2 is the AVX2 one-row int16 kernel (qmatmul_int16_avx2_amd64.s) behind the
// length checks: decode under "int16" on machines without AVX-512 BW and VNNI.
func q4Int16Dot1AVX2(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32) {
	checkInt16RowCall(codes, scales, biases, groups, acts, out)
	sx, xsum := int16Tables(acts, groups)
	q4Int16Dot1AVX2Asm(&codes[0], &scales[0], &biases[0], groups, len(out), &acts[0], &sx[0], &xsum[0], &out[0], int8RowAhead)
}

func init() {
	// VPMOVZXBW, VPMADDWD and VPSRLW on 256-bit registers, and the float32 FMAs.
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		addInt16RowKernel("avx2", q4Int16Dot1AVX2)
	}
	// The same on 512-bit registers (BW) with VPDPWSSD (VNNI) for the high nibbles.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
		addInt16RowKernel("avx512vnni", q4Int16Dot1AVX512)
	}
}
