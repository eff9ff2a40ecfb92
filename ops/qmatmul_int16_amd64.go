package ops

import "golang.org/x/sys/cpu"

//go:noescape
func q4Int16Dot1VNNI(codes *byte, scales, biases *uint16, groups, rows int, acts *byte, sx, xsum *float32, out *float32, ahead int)

// q4Int16Dot1AVX512 is the one-row int16 kernel (qmatmul_int16_amd64.s) behind the length
// checks: decode under activations = "int16".
func q4Int16Dot1AVX512(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32) {
	checkInt16RowCall(codes, scales, biases, groups, acts, out)
	sx, xsum := int16Tables(acts, groups)
	q4Int16Dot1VNNI(&codes[0], &scales[0], &biases[0], groups, len(out), &acts[0], &sx[0], &xsum[0], &out[0], int8RowAhead)
}

func init() {
	// VPMOVZXBW, VPMADDWD and VPSRLW on 512-bit registers (BW), VPDPWSSD (VNNI).
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
		int16RowKernel = q4Int16Dot1AVX512
	}
}
