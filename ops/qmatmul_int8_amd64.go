package ops

import "golang.org/x/sys/cpu"

//go:noescape
func q4Int8Dot8VNNI(codes *byte, codeStride int, scales, biases *uint16, groupStride, blocks, rows int, acts *byte, rowStride int, out *[8]float32, prefetch int)

// q4Int8Dot8AVX512 is the VNNI kernel (qmatmul_int8_amd64.s) for one weight row, behind
// the length checks.
func q4Int8Dot8AVX512(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32) {
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
	q4Int8Dot8VNNI(&codes[0], 0, &scales[0], &biases[0], 0, blocks, 1, &acts[0], rowStride, out, 0)
}

// q4Int8TileAVX512 is the VNNI kernel over a tile of weight rows in one call, behind the
// length checks, prefetching the weights ahead of its loads (see the kernel).
func q4Int8TileAVX512(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32) {
	checkInt8TileCall(codes, codeStride, scales, biases, groupStride, blocks, acts, rowStride, len(out))
	if len(out) > 0 {
		q4Int8Dot8VNNI(&codes[0], codeStride, &scales[0], &biases[0], 2*groupStride, blocks, len(out), &acts[0], rowStride, &out[0], 1)
	}
}

// q4Int8TileAVX512NoPrefetch is q4Int8TileAVX512 without the software prefetches: the
// "avx512vnni-plain" kernel, their off switch (the same sums to the bit).
func q4Int8TileAVX512NoPrefetch(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32) {
	checkInt8TileCall(codes, codeStride, scales, biases, groupStride, blocks, acts, rowStride, len(out))
	if len(out) > 0 {
		q4Int8Dot8VNNI(&codes[0], codeStride, &scales[0], &biases[0], 2*groupStride, blocks, len(out), &acts[0], rowStride, &out[0], 0)
	}
}

//go:noescape
func q4Int8Dot8AVX2Asm(codes *byte, codeStride int, scales, biases *uint16, groupStride, blocks, rows int, acts *byte, rowStride int, out *[8]float32)

// q4Int8Dot8AVX2 is the AVX2 kernel (qmatmul_int8_avx2_amd64.s) for one weight row, behind
// the length checks: the int8 path of machines without AVX-512 VNNI.
func q4Int8Dot8AVX2(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32) {
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
	q4Int8Dot8AVX2Asm(&codes[0], 0, &scales[0], &biases[0], 0, blocks, 1, &acts[0], rowStride, out)
}

// q4Int8TileAVX2 is the AVX2 kernel over a tile of weight rows in one call, behind the
// length checks.
func q4Int8TileAVX2(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32) {
	checkInt8TileCall(codes, codeStride, scales, biases, groupStride, blocks, acts, rowStride, len(out))
	if len(out) > 0 {
		q4Int8Dot8AVX2Asm(&codes[0], codeStride, &scales[0], &biases[0], 2*groupStride, blocks, len(out), &acts[0], rowStride, &out[0])
	}
}

//go:noescape
func q4Int8Dot8AVXVNNIAsm(codes *byte, codeStride int, scales, biases *uint16, groupStride, blocks, rows int, acts *byte, rowStride int, out *[8]float32)

//go:noescape
func q4Int8Dot1AVXVNNIAsm(codes *byte, scales, biases *uint16, blocks, rows int, acts *byte, out *float32)

// q4Int8Dot8AVXVNNI is the AVX-VNNI kernel (qmatmul_int8_avxvnni_amd64.s) for one weight
// row, behind the length checks: the AVX2 kernel with VEX VPDPBUSD, the same bits.
func q4Int8Dot8AVXVNNI(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32) {
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
	q4Int8Dot8AVXVNNIAsm(&codes[0], 0, &scales[0], &biases[0], 0, blocks, 1, &acts[0], rowStride, out)
}

// q4Int8TileAVXVNNI is the AVX-VNNI kernel over a tile of weight rows in one call.
func q4Int8TileAVXVNNI(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32) {
	checkInt8TileCall(codes, codeStride, scales, biases, groupStride, blocks, acts, rowStride, len(out))
	if len(out) > 0 {
		q4Int8Dot8AVXVNNIAsm(&codes[0], codeStride, &scales[0], &biases[0], 2*groupStride, blocks, len(out), &acts[0], rowStride, &out[0])
	}
}

// q4Int8Dot1AVXVNNI is the one-row AVX-VNNI kernel behind the length checks.
func q4Int8Dot1AVXVNNI(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	checkInt8RowCall(codes, scales, biases, blocks, acts, out)
	q4Int8Dot1AVXVNNIAsm(&codes[0], &scales[0], &biases[0], blocks, len(out), &acts[0], &out[0])
}

//go:noescape
func q4Int8Dot1VNNI(codes *byte, scales, biases *uint16, blocks, rows int, acts *byte, out *float32, ahead int)

// int8RowNear (eight blocks) is how far ahead of its loads the one-row VNNI kernel asks
// for weight bytes where the Intel Xeon kind measured it best (BenchmarkQMatmulStreamInt8,
// one worker): none 13.5 GB/s, 2 KiB ahead 13.9, 8 KiB 12.2; 1 KiB ahead cut the
// L2-resident kernel from 37 to 14 GB/s.
const int8RowNear = 2048

// int8RowFar is the distance on Zen 5 and later AMD processors: on the AMD EPYC kind
// with Zen 5 (2 cores; thirty-sixth session, full model, int8-all decode at context 0,
// binaries alternating) 2 KiB ahead gave 16.8-17.6 tok/s in five runs, 4 KiB 18.2-19.0 in
// five, 8 KiB 19.2 and 19.3 in two. On the same kind with Zen 4 (family 0x19, thirty-
// seventh session) 2 KiB was as fast as 8 KiB or faster in all seven alternating rounds
// (17.0-19.6 against 16.1-18.6 tok/s), so Zen 4 keeps int8RowNear (cpu/README.md).
const int8RowFar = 8192

// int8RowAhead is the distance "avx512vnni" runs with: int8RowFar on AMD processors of
// family 0x1A (Zen 5) and later, int8RowNear on the others ("avx512vnni-near" is
// int8RowNear everywhere).
var int8RowAhead = int8RowNear

// int8RowFarFamily is the first AMD family that runs int8RowFar.
const int8RowFarFamily = 0x1a

// q4Int8Dot1AVX512 is the one-row VNNI kernel (qmatmul_int8_amd64.s) behind the length
// checks: decode under activations = "int8-all".
func q4Int8Dot1AVX512(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	checkInt8RowCall(codes, scales, biases, blocks, acts, out)
	q4Int8Dot1VNNI(&codes[0], &scales[0], &biases[0], blocks, len(out), &acts[0], &out[0], int8RowAhead)
}

// q4Int8Dot1AVX512Near is q4Int8Dot1AVX512 asking int8RowNear ahead on every machine:
// "avx512vnni-near", the off switch of the distance AMD gets (the same sums to the bit).
func q4Int8Dot1AVX512Near(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	checkInt8RowCall(codes, scales, biases, blocks, acts, out)
	q4Int8Dot1VNNI(&codes[0], &scales[0], &biases[0], blocks, len(out), &acts[0], &out[0], int8RowNear)
}

//go:noescape
func q4Int8Dot1AVX2Asm(codes *byte, scales, biases *uint16, blocks, rows int, acts *byte, out *float32)

// q4Int8Dot1AVX2 is the one-row AVX2 kernel (qmatmul_int8_avx2_amd64.s) behind the length
// checks: decode under activations = "int8-all" on machines without AVX-512 VNNI.
func q4Int8Dot1AVX2(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	checkInt8RowCall(codes, scales, biases, blocks, acts, out)
	q4Int8Dot1AVX2Asm(&codes[0], &scales[0], &biases[0], blocks, len(out), &acts[0], &out[0])
}

//go:noescape
func quantizeGroupAVX512(x *float32, block *byte, lane int)

//go:noescape
func quantizeGroupAVX2(x *float32, block *byte, lane int)

// checkQuantizeGroup panics unless a vector quantizer's slices hold what it touches.
func checkQuantizeGroup(xs []float32, block []byte, j int) {
	if len(xs) < int8Group || len(block) < int8Block || j < 0 || j >= int8Groups {
		panic("ops: quantizeGroupFast called with a short group or block")
	}
}

func init() {
	// VPMADDUBSW, VPMADDWD and VPERMD on 256-bit registers, and the float32 FMAs.
	// "avx2-rowcalls" is the AVX2 kernel called once per weight row, as "avx512vnni-rowcalls"
	// is the VNNI one.
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		quantize := func(xs []float32, block []byte, j int) {
			checkQuantizeGroup(xs, block, j)
			quantizeGroupAVX2(&xs[0], &block[0], j)
		}
		addInt8Kernel("avx2-rowcalls", q4Int8Dot8AVX2, nil, q4Int8Dot1AVX2, quantize)
		addInt8Kernel("avx2", q4Int8Dot8AVX2, q4Int8TileAVX2, q4Int8Dot1AVX2, quantize)
	}
	// The AVX2 kernels with the VEX-encoded VPDPBUSD (AVX-VNNI) for their integer part, on
	// machines that have it without AVX-512 VNNI (which then takes over below); the AVX2
	// quantizer. "avxvnni-rowcalls" is it called once per weight row.
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasAVXVNNI {
		quantize := func(xs []float32, block []byte, j int) {
			checkQuantizeGroup(xs, block, j)
			quantizeGroupAVX2(&xs[0], &block[0], j)
		}
		addInt8Kernel("avxvnni-rowcalls", q4Int8Dot8AVXVNNI, nil, q4Int8Dot1AVXVNNI, quantize)
		addInt8Kernel("avxvnni", q4Int8Dot8AVXVNNI, q4Int8TileAVXVNNI, q4Int8Dot1AVXVNNI, quantize)
	}
	// VPDPBUSD on 512-bit registers, VPERMW (BW) and the mask registers; the quantizer's
	// VPMOVSDB and VPSHUFB on the upper sixteen registers (BW, VL).
	// "avx512vnni-rowcalls" is the same kernel called once per weight row (the same sums
	// to the bit): the tile kernel's off switch (PISTIL_CPU_INT8_KERNEL), and what the
	// benchmarks compare it with; "avx512vnni-plain" the tile kernel and its driver as they
	// were before the weights' prefetches and the staged stores (int8TileWarmSets,
	// int8StagedSets): their off switch.
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI {
		quantize := func(xs []float32, block []byte, j int) {
			checkQuantizeGroup(xs, block, j)
			quantizeGroupAVX512(&xs[0], &block[0], j)
		}
		addInt8Kernel("avx512vnni-rowcalls", q4Int8Dot8AVX512, nil, q4Int8Dot1AVX512, quantize)
		addInt8Kernel("avx512vnni-plain", q4Int8Dot8AVX512, q4Int8TileAVX512NoPrefetch, q4Int8Dot1AVX512, quantize)
		// "avx512vnni-near" is "avx512vnni" with the one-row kernel's prefetch distance
		// int8RowNear on every machine; added first, so "avx512vnni" stays the default.
		for _, name := range []string{"avx512vnni-near", "avx512vnni"} {
			row := q4Int8Dot1AVX512
			if name == "avx512vnni-near" {
				row = q4Int8Dot1AVX512Near
			}
			addInt8Kernel(name, q4Int8Dot8AVX512, q4Int8TileAVX512, row, quantize)
			int8TileWarmSets[name], int8TileWarmKernel = q4Int8TileAVX512NoPrefetch, q4Int8TileAVX512NoPrefetch
			int8StagedSets[name], int8StagedStores = true, true
			int8ExpertRowsSets[name], int8ExpertRows = 1024, 1024
		}
		if amdFamily() >= int8RowFarFamily {
			int8RowAhead = int8RowFar
		}
	}
}
