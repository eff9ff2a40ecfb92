package ops

import (
	"math"
	"unsafe"

	"pistil/graph"
)

// int16-activation q4 matrix-vector products for decode (activations = "int16"). The
// float32 one-row kernels are bound by decoding the codes into float lanes (one FMA per 16
// weights plus their unpacking, cpu/README.md), not by the weights' bytes; the int8 row
// kernel streams at memory speed but rounds each activation by up to max|x|/254, which
// moves the golden logits far past `pistil check`'s exact bound. Rounding the activation
// row to int16 per group of 64 instead (a float32 scale per group, steps of max|x|/32767)
// moves each product 128 times less than int8 does, and the codes meet the activations in
// integer multiply-adds of 32 products an instruction (VPMADDWD, VPDPWSSD):
//
//	Σ w·x ≈ Σ w·x̂ = Σ_g s_g·sx_g·(Σ q·xq) + b_g·sx_g·(Σ xq)
//
// with w = s·q + b per group and x̂ = sx·xq, as the int8 path (qmatmul_int8.go), both
// integer sums exact in int32 (a lane holds at most eight products of 15·32,767 a group,
// fewer than 2^24: its conversion to float32 is exact too).
//
// The kernel widens a group's 32 code bytes to 32 words (VPMOVZXBW): the low nibble of
// byte i is element 2i, the high nibble element 2i+1, so the activation row stores each
// group as its 32 even elements, then its 32 odd ones, and the products of a group land in
// the 16 dword lanes of one vector, which one conversion and one FMA by the group's
// s_g·sx_g add to the row's float32 sums. No transpose and no repack of the weights.
//
// The AVX2 kernel does the same on 256-bit registers (four VPMADDWD a group) for machines
// without AVX-512 BW and VNNI.
//
// Activation layout of one row of G groups (int16RowBytes(G) bytes):
//
//	[0, 128·G)                 group g at 128·g: xq[2i] for i < 32, then xq[2i+1]
//	[128·G, 128·G + 4·Gp)      float32 sx_g (Gp = G rounded up to 16; zeros past G)
//	[128·G + 4·Gp, + 8·Gp)     float32 sx_g·Σxq_g, the bias term's sum of the rounded x

// ActivationsInt16 is int16 activations in decode's one-row q4 matmuls, float32 in the
// others (prefill): see the top of qmatmul_int16.go.
const ActivationsInt16 = "int16"

const (
	int16Group      = 64             // the only group size the layout takes
	int16GroupBytes = 2 * int16Group // activation bytes of one group
	int16TableUnit  = 16             // the scale tables are padded to this many groups
	int16Step       = 32767          // the largest code: steps of max|x|/int16Step
	int16CodeBytes  = int16Group / 2 // q4 code bytes of one group
	int16RowRun     = int8RowRun     // weight rows one kernel call covers at most
	int16RoundBias  = 0x1.8p23       // adding it leaves a float's nearest integer in its low bits
	int16RoundBits  = 0x4b400000     // the bits of int16RoundBias
)

// int16Dot1 is one implementation of the one-row int16 kernel: out[r] = the dot of the
// activation row acts (groups groups in the int16 layout) with each of len(out)
// consecutive q4 weight rows of groups groups (their codes, scales and biases back to
// back).
type int16Dot1 func(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32)

// int16RowKernel is the machine's row kernel, the fastest of int16RowKernelSets (the
// amd64 init adds AVX2's, then AVX-512 VNNI's); nil, and "int16" runs the float32 kernels.
var int16RowKernel int16Dot1

// int16RowKernelSets holds every row kernel this machine has, by name: the tests check each.
var int16RowKernelSets = map[string]int16Dot1{}

// addInt16RowKernel lists a row kernel of this machine and makes it the one in use (the
// amd64 init adds them slowest first).
func addInt16RowKernel(name string, k int16Dot1) {
	int16RowKernelSets[name] = k
	int16RowKernel = k
}

// HasInt16Kernel reports whether this machine has the int16 row kernel: where it has
// none, activations = "int16" runs the float32 kernels.
func HasInt16Kernel() bool { return int16RowKernel != nil }

// int16Decode reports whether env asks for int16 activations in one-row matmuls (never
// with the reference kernels).
func (e *Env) int16Decode() bool {
	return e != nil && e.Activations == ActivationsInt16 && !e.referenceKernels()
}

// int16Fits reports whether the int16 path takes P rows against w under env: one row of a
// q4 matrix of groups of 64, on a machine with the kernel.
func int16Fits(env *Env, w weightRows, P int) bool {
	return P == 1 && int16RowKernel != nil && env.int16Decode() && w.t.DType == graph.Q4 && w.t.Group == int16Group
}

// int16TableGroups is G rounded up to whole units of the scale tables.
func int16TableGroups(G int) int { return (G + int16TableUnit - 1) / int16TableUnit * int16TableUnit }

// int16RowBytes is the layout bytes of one activation row of G groups.
func int16RowBytes(G int) int { return G*int16GroupBytes + 8*int16TableGroups(G) }

// int16Tables returns the scale table and the bias term's table of a row's layout.
func int16Tables(acts []byte, G int) (sx, xsum []float32) {
	Gp := int16TableGroups(G)
	tables := f32s(acts[G*int16GroupBytes : G*int16GroupBytes+8*Gp])
	return tables[:Gp], tables[Gp : 2*Gp]
}

// i16s views b as int16s (b's length even).
func i16s(b []byte) []int16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// quantizeInt16Row writes row x (G groups of 64) into dst (int16RowBytes(G) bytes) in the
// kernel's layout: each element rounded to the nearest step of its group's max|x|/32767,
// halves to even.
func quantizeInt16Row(x []float32, G int, dst []byte) {
	codes := i16s(dst[:G*int16GroupBytes])
	sx, xsum := int16Tables(dst, G)
	clear(sx[G:])
	clear(xsum[G:])
	for g := 0; g < G; g++ {
		xs := x[g*int16Group : (g+1)*int16Group : (g+1)*int16Group]
		q := codes[g*int16Group : (g+1)*int16Group : (g+1)*int16Group]
		var amax float32
		for _, v := range xs {
			amax = max(amax, abs32(v))
		}
		if amax == 0 {
			clear(q) // a zero group: zero codes, scale and sum
			sx[g], xsum[g] = 0, 0
			continue
		}
		inv := int16Step / amax
		var qsum int32
		for i := 0; i < int16Group/2; i++ {
			even, odd := roundInt16(xs[2*i]*inv), roundInt16(xs[2*i+1]*inv)
			q[i], q[int16Group/2+i] = even, odd
			qsum += int32(even) + int32(odd)
		}
		s := amax / int16Step
		sx[g], xsum[g] = s, float32(qsum)*s
	}
}

// roundInt16 rounds v (|v| <= 32767 by construction) to the nearest integer, halves to
// even, as roundInt8.
func roundInt16(v float32) int16 {
	return int16(int32(math.Float32bits(v+int16RoundBias)) - int16RoundBits)
}

// prepareInt16 fills a's int16 layout from its one row x.
func prepareInt16(a *quantActs, x []float32) {
	G := a.K / int16Group
	a.int16 = growBytes(&a.buf.int16, int16RowBytes(G))
	quantizeInt16Row(x[:a.K], G, a.int16)
}

// mulQuantInt16Row is mulQuantRow for int16-prepared activations: the weight rows stream
// through the row kernel in runs of consecutive rows, never crossing a slice of a strided
// stack, weight row r's result to dst[r-lo].
func mulQuantInt16Row(a *quantActs, w weightRows, rowBase, lo, hi int, dst []float32) {
	G := a.K / int16Group
	for r0 := lo; r0 < hi; {
		n := min(int16RowRun, hi-r0)
		if w.t.Stride0 != 0 {
			n = min(n, w.rowsPerSlice-(rowBase+r0)%w.rowsPerSlice)
		}
		codes, scales, biases := w.locateRun(rowBase+r0, n)
		int16RowKernel(codes, scales, biases, G, a.int16, dst[r0-lo:r0-lo+n])
		r0 += n
	}
}

// checkInt16RowCall panics unless a row kernel call's slices hold what it reads (a bug in
// the caller, caught in Go before the assembly reads past an end).
func checkInt16RowCall(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32) {
	rows := len(out)
	if groups <= 0 || rows == 0 || len(codes) < rows*groups*int16CodeBytes || len(scales) < rows*groups ||
		len(biases) < rows*groups || len(acts) < int16RowBytes(groups) {
		panic("ops: int16 row kernel called with a short row")
	}
}

// q4Int16Dot1Go is the portable row kernel, the assembly's oracle: the same integer sums
// per group, scaled in float32 group by group.
func q4Int16Dot1Go(codes []byte, scales, biases []uint16, groups int, acts []byte, out []float32) {
	checkInt16RowCall(codes, scales, biases, groups, acts, out)
	xq := i16s(acts[:groups*int16GroupBytes])
	sx, xsum := int16Tables(acts, groups)
	for r := range out {
		var sum, bias float32
		for g := 0; g < groups; g++ {
			rg := r*groups + g
			cb := codes[rg*int16CodeBytes : (rg+1)*int16CodeBytes]
			q := xq[g*int16Group : (g+1)*int16Group]
			var isum int32
			for i, c := range cb {
				isum += int32(c&15)*int32(q[i]) + int32(c>>4)*int32(q[int16Group/2+i])
			}
			sum += float32(isum) * (BF16ToF32(scales[rg]) * sx[g])
			bias += BF16ToF32(biases[rg]) * xsum[g]
		}
		out[r] = sum + bias
	}
}
