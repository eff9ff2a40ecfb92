package ops

import (
	"golang.org/x/sys/cpu"
)

// amd64 kernels: AVX2 and FMA assembly (qkernels_amd64.s), taken when the CPU has both
// (and the OS saves the YMM state, which x/sys/cpu checks).

//go:noescape
func q4Dot1AVX2(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32

//go:noescape
func q8Dot1AVX2(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32

//go:noescape
func q4Dot4AVX2(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)

//go:noescape
func q8Dot4AVX2(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)

// avx2Kernels are the assembly kernels. The wrappers check every length the assembly
// relies on, so a short slice panics in Go (a bug in the caller) instead of reading past
// the end.
var avx2Kernels = &quantKernels{
	name:         "avx2",
	unit:         32,
	interleaveQ4: 16,
	dot1: [2]func([]byte, []uint16, []uint16, int, []float32, []float32) float32{
		func(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
			G := len(scales)
			checkRow(codes, biases, G, group, 32, 4, x, xsum, 1)
			return q4Dot1AVX2(&codes[0], &scales[0], &biases[0], G, group/32, &x[0], &xsum[0])
		},
		func(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
			G := len(scales)
			checkRow(codes, biases, G, group, 32, 8, x, xsum, 1)
			return q8Dot1AVX2(&codes[0], &scales[0], &biases[0], G, group/32, &x[0], &xsum[0])
		},
	},
	dot4: [2]func([]byte, []uint16, []uint16, int, []float32, int, []float32, *[4]float32){
		func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
			G := len(scales)
			checkRow(codes, biases, G, group, 16, 4, x[3*xStride:], xsum4, 4)
			q4Dot4AVX2(&codes[0], &scales[0], &biases[0], G, group/16, &x[0], 4*xStride, &xsum4[0], out)
		},
		func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
			G := len(scales)
			checkRow(codes, biases, G, group, 16, 8, x[3*xStride:], xsum4, 4)
			q8Dot4AVX2(&codes[0], &scales[0], &biases[0], G, group/16, &x[0], 4*xStride, &xsum4[0], out)
		},
	},
}

//go:noescape
func q4Dot1AVX512(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32

//go:noescape
func q8Dot1AVX512(codes *byte, scales, biases *uint16, groups, units int, x, xsum *float32) float32

//go:noescape
func q4Dot4AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)

//go:noescape
func q8Dot4AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, xsum4 *float32, out *[4]float32)

//go:noescape
func q4Dot8AVX512(codes *byte, scales, biases *uint16, groups, units int, x *float32, xStride int, out *[8]float32)

//go:noescape
func q4Dot1x4AVX512(codes *byte, rowBytes int, scales, biases *uint16, groups, units int, x *float32, out *[4]float32)

//go:noescape
func q4Dot8x2AVX512(codes *byte, rowBytes int, scales, biases *uint16, sbStride, groups, units int, x *float32, xStride int, out *[16]float32)

// avx512Kernels dequantize in registers (qkernels_avx512_amd64.s) 64 codes at a time.
var avx512Kernels = &quantKernels{
	name:         "avx512",
	unit:         64,
	interleaveQ4: 32,
	dot1: [2]func([]byte, []uint16, []uint16, int, []float32, []float32) float32{
		func(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
			G := len(scales)
			checkRow(codes, biases, G, group, 64, 4, x, xsum, 1)
			return q4Dot1AVX512(&codes[0], &scales[0], &biases[0], G, group/64, &x[0], &xsum[0])
		},
		func(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
			G := len(scales)
			checkRow(codes, biases, G, group, 64, 8, x, xsum, 1)
			return q8Dot1AVX512(&codes[0], &scales[0], &biases[0], G, group/64, &x[0], &xsum[0])
		},
	},
	dot4: [2]func([]byte, []uint16, []uint16, int, []float32, int, []float32, *[4]float32){
		func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
			G := len(scales)
			checkRow(codes, biases, G, group, 64, 4, x[3*xStride:], xsum4, 4)
			q4Dot4AVX512(&codes[0], &scales[0], &biases[0], G, group/64, &x[0], 4*xStride, &xsum4[0], out)
		},
		func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
			G := len(scales)
			checkRow(codes, biases, G, group, 64, 8, x[3*xStride:], xsum4, 4)
			q8Dot4AVX512(&codes[0], &scales[0], &biases[0], G, group/64, &x[0], 4*xStride, &xsum4[0], out)
		},
	},
	q4Dot8: func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, out *[8]float32) {
		G := len(scales)
		checkRow(codes, biases, G, group, 64, 4, x[7*xStride:], nil, 0)
		q4Dot8AVX512(&codes[0], &scales[0], &biases[0], G, group/64, &x[0], 4*xStride, out)
	},
	q4Dot8x2: func(codes []byte, rowBytes int, scales, biases []uint16, sbStride, group int, x []float32, xStride int, out *[16]float32) {
		G := len(scales) - sbStride
		if G <= 0 || len(biases) != len(scales) || len(codes) != rowBytes+G*group/2 {
			panic("ops: q4Dot8x2 called with runs that are not two rows")
		}
		checkRow(codes[rowBytes:], biases[sbStride:], G, group, 64, 4, x[7*xStride:], nil, 0)
		q4Dot8x2AVX512(&codes[0], rowBytes, &scales[0], &biases[0], 2*sbStride, G, group/64, &x[0], 4*xStride, out)
	},
	q4Dot1x4: func(codes []byte, scales, biases []uint16, group int, x []float32, out *[4]float32) {
		G := len(scales) / 4
		rowBytes := len(codes) / 4
		if G == 0 || len(scales) != 4*G || len(codes) != 4*rowBytes || rowBytes != G*group/2 {
			panic("ops: q4Dot1x4 called with a run that is not four rows")
		}
		checkRow(codes[3*rowBytes:], biases[3*G:], G, group, 64, 4, x, nil, 0)
		q4Dot1x4AVX512(&codes[0], rowBytes, &scales[0], &biases[0], G, group/64, &x[0], out)
	},
}

// checkRow panics unless a row of G groups and the activations it meets are all there
// (the last activation row, for dot4) and the group size suits the kernels.
func checkRow(codes []byte, biases []uint16, G, group, unit, bits int, lastX, xsum []float32, rows int) {
	if G == 0 || group%unit != 0 || len(codes) < G*group*bits/8 || len(biases) < G ||
		len(lastX) < G*group || len(xsum) < G*rows {
		panic("ops: quantized kernel called with a short row")
	}
}

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		fastKernels = avx2Kernels
		quantKernelSets = append(quantKernelSets, avx2Kernels)
		if cpu.X86.HasAVX512F {
			if !cpu.X86.HasAVX512BW {
				// The multi-row kernels broadcast each bf16 scale and bias with VPBROADCASTW.
				avx512Kernels.q4Dot1x4, avx512Kernels.q4Dot8x2 = nil, nil
			}
			fastKernels = avx512Kernels
			quantKernelSets = append(quantKernelSets, avx512Kernels)
		}
	}
}

//go:noescape
func interleave32AVX512(src, dst *float32, runs int)

func init() {
	if cpu.X86.HasAVX512F {
		interleaveFast = func(src, dst []float32, n int) bool {
			if n != 32 || len(src)%32 != 0 || len(dst) < len(src) || len(src) == 0 {
				return false
			}
			interleave32AVX512(&src[0], &dst[0], len(src)/32)
			return true
		}
	}
}
