package ops

import "golang.org/x/sys/cpu"

//go:noescape
func q4Int8Dot8VNNI(codes *byte, scales, biases *uint16, blocks int, acts *byte, rowStride int, out *[8]float32)

// q4Int8Dot8AVX512 is the VNNI kernel (qmatmul_int8_amd64.s) behind the length checks.
func q4Int8Dot8AVX512(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32) {
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
	q4Int8Dot8VNNI(&codes[0], &scales[0], &biases[0], blocks, &acts[0], rowStride, out)
}

func init() {
	// VPDPBUSD on 512-bit registers, VPERMW (BW) and the mask registers.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI {
		int8Kernel = q4Int8Dot8AVX512
		int8KernelSets["avx512vnni"] = q4Int8Dot8AVX512
	}
}
