package ops

import (
	"sync"

	"pistil/graph"
)

// Fast quantized matmul: x·Wᵀ for q4/q8 W and any number of activation rows, one weight
// row at a time, never dequantized to memory, with activation rows taken four at a time
// so that each decoded code feeds four multiply-adds. The inner loops are kernels chosen
// at start-up: AVX-512 assembly (qkernels_avx512_amd64.s, dequantizing in registers),
// AVX2/FMA assembly (qkernels_amd64.s) and portable Go (goQuantKernels, arm64 and the
// rest), the last two with the group-sum dot y = Σ_g s·Σq·x + b·Σx. Accumulation is
// float32; activations stay float32 unless Env.Activations asks for int8 (qmatmul_int8.go).
// Env.Kernels = "reference" switches all of it off in favour of the plain paths of
// rows.go, which are checked against Tensor.Row.

// Kernel choices for Env.Kernels (and pipeline.toml [cpu] kernels).
const (
	KernelsFast      = "fast"      // the fastest kernels this machine has (the default)
	KernelsReference = "reference" // the plain Go paths, the oracle of the fast ones
)

// referenceKernels reports whether the fast kernels are switched off.
func (e *Env) referenceKernels() bool { return e != nil && e.Kernels == KernelsReference }

// quantKernels is one implementation of the quantized row dots. codes, scales and biases
// are one weight row (rows.go locate); x is in the kernel's element order (prepareActs).
type quantKernels struct {
	name string
	// unit is how many elements the kernels consume per step: a group size that is not a
	// multiple of it goes to slower kernels that take it (kernelsFor).
	unit int
	// interleaveQ4, when not zero, stores each run of that many activations of a q4 row
	// as its even elements, then its odd ones: the order in which the kernel unpacks the
	// low and the high nibbles of interleaveQ4/2 bytes.
	interleaveQ4 int
	// dot1 returns x · row for one activation row; xsum is x's group sums.
	dot1 [2]func(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32
	// dot4 writes x_p · row for four activation rows stored xStride apart; xsum4 holds
	// the group sums as [group][4].
	dot4 [2]func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32)
	// q4Dot8, where a set has it, is dot4 for eight activation rows of a q4 weight (no
	// group sums: only kernels that dequantize in registers have it).
	q4Dot8 func(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, out *[8]float32)
	// q4Dot1x4, where a set has it, is dot1 for four consecutive rows of a q4 weight (their
	// codes, scales and biases back to back, weightRows.locateRun), each row's dot the
	// same bits as dot1's: decode's matrix-vector products take rows four at a time.
	q4Dot1x4 func(codes []byte, scales, biases []uint16, group int, x []float32, out *[4]float32)
	// q4Dot8x2, where a set has q4Dot8, is q4Dot8 for two weight rows at once: codes holds
	// the first row's chunk and the second's, rowBytes apart (len(codes) = rowBytes + the
	// chunk's bytes), scales and biases likewise sbStride groups apart; out[0:8] is the
	// first row's, out[8:16] the second's, each the bits q4Dot8 gives it.
	q4Dot8x2 func(codes []byte, rowBytes int, scales, biases []uint16, sbStride, group int, x []float32, xStride int, out *[16]float32)
}

// bitsIndex maps a quantized dtype to the index of its kernels.
func bitsIndex(dt graph.DType) int {
	if dt == graph.Q8 {
		return 1
	}
	return 0
}

// fastKernels is the best implementation for this machine (set by the amd64 init from the
// CPU's features). Tests swap it to check every implementation.
var fastKernels = goQuantKernels

// quantKernelSets lists every implementation this machine can run, slowest first.
var quantKernelSets = []*quantKernels{goQuantKernels}

// kernelsFor returns the fastest kernels, up to fastKernels, that take a quantized
// weight's group size.
func kernelsFor(group int) *quantKernels {
	best := goQuantKernels
	for _, k := range quantKernelSets {
		if group%k.unit == 0 {
			best = k
		}
		if k == fastKernels {
			break
		}
	}
	return best
}

// quantActs are activation rows prepared for the kernels: reordered as the kernels
// read them, padded to a multiple of four rows (zero rows) when there is more than one,
// with their group sums.
type quantActs struct {
	k    *quantKernels
	bits int // index into k.dot1 / k.dot4
	P, K int
	x    []float32 // rows of K in kernel order; P==1: one row, else ceil(P/4)*4 rows
	xsum []float32 // P==1: [G]; else per block of four rows [G][4]
	// int8, when not nil, is the rows quantized in the int8 kernel's layout
	// (qmatmul_int8.go), which then replaces x and xsum; int16 likewise the one row in
	// the int16 kernel's layout (qmatmul_int16.go).
	int8, int16 []byte
	buf         *actsBuffers
}

// actsBuffers back a quantActs' x and xsum; release hands them to the next call (a
// prefill chunk's activations are megabytes per matmul, and allocating them every call
// was a visible share of the time in clearing memory).
type actsBuffers struct {
	x, xsum     []float32
	int8, int16 []byte
	// acts is the quantActs these buffers back, handed out and recycled with them: a
	// decode step prepares activations hundreds of times.
	acts quantActs
}

var actsPool sync.Pool

// release recycles a (with its buffers); a must not be used after it.
func (a *quantActs) release() {
	if buf := a.buf; buf != nil {
		a.buf, a.x, a.xsum, a.int8, a.int16 = nil, nil, nil, nil, nil
		actsPool.Put(buf)
	}
}

// prepareActs reorders and sums the P rows of x (each w.cols long) for w's kernels,
// splitting the rows over env's workers (env may be nil: one worker).
func prepareActs(env *Env, w weightRows, x []float32, P int) *quantActs {
	K := w.cols
	return prepareActsFrom(env, w, P, func(p int) []float32 { return x[p*K : (p+1)*K] })
}

// prepareActsFrom is prepareActs over P rows that row(p) returns, wherever they lie (the
// tokens routed to one expert, gathered in the same pass). env also says whether the rows
// are quantized to int8 (int8Fits), or a decode row to int16 (int16Fits).
func prepareActsFrom(env *Env, w weightRows, P int, row func(p int) []float32) *quantActs {
	K, group := w.cols, w.t.Group
	G := K / group
	k := kernelsFor(group)
	buf, _ := actsPool.Get().(*actsBuffers)
	if buf == nil {
		buf = &actsBuffers{}
	}
	a := &buf.acts
	*a = quantActs{k: k, bits: bitsIndex(w.t.DType), P: P, K: K, buf: buf}
	if int8Fits(env, w, P) {
		prepareInt8(env, a, G, row)
		return a
	}
	if int16Fits(env, w, P) {
		prepareInt16(a, row(0))
		return a
	}
	rows := P
	if P > 1 {
		rows = (P + 3) &^ 3
	}
	a.x = grow(&a.buf.x, rows*K)
	a.xsum = grow(&a.buf.xsum, rows*G)
	if P > 1 {
		clear(a.x[P*K:]) // the padding rows: zero, not a previous call's data
		clear(a.xsum)
	}
	interleave := 0
	if w.t.DType == graph.Q4 {
		interleave = k.interleaveQ4
	}
	prepare := func(lo, hi int) {
		var sums []float32
		for p := lo; p < hi; p++ {
			src, dst := row(p)[:K], a.x[p*K:(p+1)*K]
			if interleave > 0 {
				interleaveEvenOdd(src, dst, interleave)
			} else {
				copy(dst, src)
			}
			if P == 1 {
				groupSums(src, group, a.xsum)
				continue
			}
			sums = groupSums(src, group, sums)
			blk, lane := p/4, p%4
			for g, s := range sums {
				a.xsum[(blk*G+g)*4+lane] = s
			}
		}
	}
	// Splitting pays only when there is real work (a prefill chunk): a decode row is done
	// before the goroutines would start.
	if P*K >= 1<<16 {
		parallelRange(env, P, prepare)
	} else {
		prepare(0, P)
	}
	return a
}

// interleaveEvenOdd writes each run of n elements of src as its even elements, then its
// odd ones (len(src) is a multiple of n).
func interleaveEvenOdd(src, dst []float32, n int) {
	dst = dst[:len(src)]
	if interleaveFast != nil && interleaveFast(src, dst, n) {
		return
	}
	half := n / 2
	for i := 0; i+n <= len(src); i += n {
		s, d := src[i:i+n:i+n], dst[i:i+n:i+n]
		for j := 0; j < half; j++ {
			d[j] = s[2*j]
			d[half+j] = s[2*j+1]
		}
	}
}

// interleaveFast, where the machine has it, is interleaveEvenOdd in vector registers; it
// reports false for run lengths it does not take.
var interleaveFast func(src, dst []float32, n int) bool

// outRows gives the output row of activation row p, indexed by weight row (at least
// [lo, hi) of the call it is passed to): results are written a run of weight rows at a
// time into it, not handed over one call per element (a closure call and a scattered
// store per result were 15% of an int8 prefill of the full model's widths).
type outRows func(p int) []float32

// mulQuant computes x_p · w.row(rowBase + r) for r in [lo, hi) and p < a.P into
// dst(p)[r].
func mulQuant(a *quantActs, w weightRows, rowBase, lo, hi int, dst outRows) {
	if lo >= hi {
		return
	}
	if a.P == 1 {
		mulQuantRow(a, w, rowBase, lo, hi, dst(0)[lo:hi])
		return
	}
	if a.int8 != nil {
		mulQuantInt8(a, w, rowBase, lo, hi, dst)
		return
	}
	K, G := a.K, a.K/w.t.Group
	dot4 := a.k.dot4[a.bits]
	// The weight rows go in tiles of about 256 KiB, which stay in the L2 cache while every
	// block of activation rows sweeps them (mulQuantBlock keeps the block in L1), so each
	// weight byte comes from memory once per call, not once per block. Blocks are eight
	// rows where the kernels can (twice the multiply-adds per decoded code), else four.
	data0, _, _ := w.locate(rowBase + lo)
	tile := max(16, (256<<10)/(len(data0)+4*G))
	padded := len(a.x) / K
	sums := tileSums(tile)
	defer tileSumsPool.Put(sums)
	blk := blockKernels{dot4: dot4, dot8: a.k.q4Dot8, acc: *sums}
	if w.t.DType != graph.Q4 {
		blk.dot8 = nil
	}
	if blk.dot8 != nil && multiRowKernels.Load() {
		blk.dot8x2 = a.k.q4Dot8x2
	}
	for r0 := lo; r0 < hi; r0 += tile {
		r1 := min(r0+tile, hi)
		for p0 := 0; p0 < a.P; {
			rows := 4
			if blk.dot8 != nil && p0+8 <= padded {
				rows = 8
			}
			mulQuantBlock(a, w, rowBase, r0, r1, p0, rows, &blk, dst)
			p0 += rows
		}
	}
}

// mulQuantRow is mulQuant for one activation row (decode) with the results written to
// dst[r-lo] for r in [lo, hi): no call per weight row, which at decode's 1.5 million rows
// per token of the full model was a few percent of the step.
func mulQuantRow(a *quantActs, w weightRows, rowBase, lo, hi int, dst []float32) {
	if lo >= hi {
		return
	}
	if a.P != 1 {
		panic("ops: mulQuantRow called with more than one activation row")
	}
	dst = dst[:hi-lo]
	if a.int8 != nil {
		mulQuantInt8RowTo(a, 0, w, rowBase, lo, hi, dst)
		return
	}
	if a.int16 != nil {
		mulQuantInt16Row(a, w, rowBase, lo, hi, dst)
		return
	}
	dot1, group := a.k.dot1[a.bits], w.t.Group
	r := lo
	if four := a.k.q4Dot1x4; four != nil && a.bits == 0 && multiRowKernels.Load() {
		for r+4 <= hi {
			if !w.runInSlice(rowBase+r, 4) { // the four would cross into the next expert's slice
				data, scales, biases := w.locate(rowBase + r)
				dst[r-lo] = dot1(data, scales, biases, group, a.x, a.xsum)
				r++
				continue
			}
			data, scales, biases := w.locateRun(rowBase+r, 4)
			four(data, scales, biases, group, a.x, (*[4]float32)(dst[r-lo:r-lo+4])) // in place: no array to escape
			r += 4
		}
	}
	for ; r < hi; r++ {
		data, scales, biases := w.locate(rowBase + r)
		dst[r-lo] = dot1(data, scales, biases, group, a.x, a.xsum)
	}
}

// blockKernels are the block kernels mulQuantBlock calls and its partial sums.
type blockKernels struct {
	dot4   func([]byte, []uint16, []uint16, int, []float32, int, []float32, *[4]float32)
	dot8   func([]byte, []uint16, []uint16, int, []float32, int, *[8]float32)
	dot8x2 func([]byte, int, []uint16, []uint16, int, int, []float32, int, *[16]float32) // two weight rows of dot8, where the set has it and multiRowKernels
	acc    [][8]float32                                                                  // one per weight row of a tile
}

// blockBytes is the activation bytes one block kernel call may read: the block of rows
// must stay in the L1 cache while the weight rows of a tile sweep it (the kernels load
// eight times more activation bytes than weight bytes).
const blockBytes = 32 << 10

// tileSumsPool holds mulQuant's sums of a tile of weight rows (7-30 KB, cleared by every
// block before use): a fresh slice per call, one per expert and work item, was 8% of a
// float32 prefill of the full model in the allocator and its clearing.
var tileSumsPool sync.Pool

// tileSums returns sums for n weight rows from tileSumsPool (their contents arbitrary).
func tileSums(n int) *[][8]float32 {
	p, _ := tileSumsPool.Get().(*[][8]float32)
	if p == nil || cap(*p) < n {
		s := make([][8]float32, n)
		p = &s
	}
	*p = (*p)[:n]
	return p
}

// mulQuantBlock is mulQuant's block of n (4 or 8) activation rows from p0 against weight
// rows [r0, r1). Long rows are cut into chunks whose n-row block fits in blockBytes, and
// the partial dots of the chunks are summed.
func mulQuantBlock(a *quantActs, w weightRows, rowBase, r0, r1, p0, n int, blk *blockKernels, dst outRows) {
	K, G, group := a.K, a.K/w.t.Group, w.t.Group
	bits := w.t.DType.Bits()
	chunk := max(group, blockBytes/(4*n)/group*group)
	acc := blk.acc[:r1-r0]
	clear(acc)
	var out4 [4]float32
	var out8 [8]float32
	var out16 [16]float32
	for k0 := 0; k0 < K; k0 += chunk {
		k1 := min(k0+chunk, K)
		g0, g1 := k0/group, k1/group
		x := a.x[p0*K+k0 : (p0+n-1)*K+k1]
		xsum := a.xsum[p0*G+4*g0 : p0*G+4*g1]
		for r := r0; r < r1; r++ {
			if n == 8 && blk.dot8x2 != nil && r+1 < r1 && w.runInSlice(rowBase+r, 2) {
				data, scales, biases := w.locateRun(rowBase+r, 2)
				rowBytes := len(data) / 2
				blk.dot8x2(data[k0*bits/8:rowBytes+k1*bits/8], rowBytes, scales[g0:G+g1], biases[g0:G+g1], G, group, x, K, &out16)
				for i, v := range out16[:8] {
					acc[r-r0][i] += v
				}
				for i, v := range out16[8:] {
					acc[r+1-r0][i] += v
				}
				r++
				continue
			}
			data, scales, biases := w.locate(rowBase + r)
			codes := data[k0*bits/8 : k1*bits/8]
			sum := &acc[r-r0]
			if n == 8 {
				blk.dot8(codes, scales[g0:g1], biases[g0:g1], group, x, K, &out8)
				for i, v := range out8 {
					sum[i] += v
				}
			} else {
				blk.dot4(codes, scales[g0:g1], biases[g0:g1], group, x, K, xsum, &out4)
				for i, v := range out4 {
					sum[i] += v
				}
			}
		}
	}
	storeAcc(acc, p0, min(n, a.P-p0), r0, dst, false)
}

// storeAccChunk is the weight rows storeAcc stages at a time (int8StagedStores): eight
// runs of 64 floats, 2 KiB on the stack, each a whole number of cache lines.
const storeAccChunk = 64

// storeAcc writes the sums of weight rows [r0, r0+len(acc)) against activation rows
// [p0, p0+valid) into their output rows. Eight rows (all but a last partial block) go in
// one pass over the sums, each read once: at one block a weight row (the experts' down
// projection) a pass per row was 17% of the matmul's time. staged (the int8 driver under
// int8StagedStores) puts every block through a staging buffer, each output run copied
// whole.
func storeAcc(acc [][8]float32, p0, valid, r0 int, dst outRows, staged bool) {
	n := len(acc)
	if staged {
		var o [8][]float32
		for i := range valid {
			o[i] = dst(p0 + i)[r0 : r0+n]
		}
		var buf [8][storeAccChunk]float32
		for c0 := 0; c0 < n; c0 += storeAccChunk {
			m := min(storeAccChunk, n-c0)
			for r, a := range acc[c0 : c0+m] {
				buf[0][r], buf[1][r], buf[2][r], buf[3][r] = a[0], a[1], a[2], a[3]
				buf[4][r], buf[5][r], buf[6][r], buf[7][r] = a[4], a[5], a[6], a[7]
			}
			for i := range valid {
				copy(o[i][c0:c0+m], buf[i][:m])
			}
		}
		return
	}
	if valid == 8 {
		o0, o1, o2, o3 := dst(p0)[r0:r0+n], dst(p0 + 1)[r0:r0+n], dst(p0 + 2)[r0:r0+n], dst(p0 + 3)[r0:r0+n]
		o4, o5, o6, o7 := dst(p0 + 4)[r0:r0+n], dst(p0 + 5)[r0:r0+n], dst(p0 + 6)[r0:r0+n], dst(p0 + 7)[r0:r0+n]
		for r := range acc {
			a := &acc[r]
			o0[r], o1[r], o2[r], o3[r] = a[0], a[1], a[2], a[3]
			o4[r], o5[r], o6[r], o7[r] = a[4], a[5], a[6], a[7]
		}
		return
	}
	for i := 0; i < valid; i++ {
		out := dst(p0 + i)[r0 : r0+n]
		for r := range out {
			out[r] = acc[r][i]
		}
	}
}

// goQuantKernels are the portable kernels: plain Go, bounds checks hoisted, several
// independent accumulators.
var goQuantKernels = &quantKernels{
	name: "go",
	unit: 8,
	dot1: [2]func([]byte, []uint16, []uint16, int, []float32, []float32) float32{q4Dot1Go, q8Dot1Go},
	dot4: [2]func([]byte, []uint16, []uint16, int, []float32, int, []float32, *[4]float32){q4Dot4Go, q8Dot4Go},
}

// q4Dot1Go is x · row for a q4 row. nibblePairs turns each byte into its two codes as
// floats with one load, cheaper than two integer-to-float conversions.
func q4Dot1Go(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
	var acc, bacc float32
	gb := group / 2
	codes = codes[:len(scales)*gb]
	x = x[:len(scales)*group]
	xsum = xsum[:len(scales)]
	biases = biases[:len(scales)]
	for g, s := range scales {
		c := codes[g*gb : (g+1)*gb]
		xs := x[g*group : (g+1)*group]
		var s0, s1, s2, s3 float32
		for j := 0; j+4 <= len(c); j += 4 {
			cc := c[j : j+4 : j+4]
			xx := xs[2*j : 2*j+8 : 2*j+8]
			p0, p1, p2, p3 := &nibblePairs[cc[0]], &nibblePairs[cc[1]], &nibblePairs[cc[2]], &nibblePairs[cc[3]]
			s0 += p0[0]*xx[0] + p2[0]*xx[4]
			s1 += p0[1]*xx[1] + p2[1]*xx[5]
			s2 += p1[0]*xx[2] + p3[0]*xx[6]
			s3 += p1[1]*xx[3] + p3[1]*xx[7]
		}
		acc += BF16ToF32(s) * ((s0 + s1) + (s2 + s3))
		bacc += BF16ToF32(biases[g]) * xsum[g]
	}
	return acc + bacc
}

// q8Dot1Go is x · row for a q8 row.
func q8Dot1Go(codes []byte, scales, biases []uint16, group int, x, xsum []float32) float32 {
	var acc, bacc float32
	codes = codes[:len(scales)*group]
	x = x[:len(scales)*group]
	xsum = xsum[:len(scales)]
	biases = biases[:len(scales)]
	for g, s := range scales {
		c := codes[g*group : (g+1)*group]
		xs := x[g*group : (g+1)*group]
		var s0, s1, s2, s3 float32
		for j := 0; j+4 <= len(c); j += 4 {
			cc := c[j : j+4 : j+4]
			xx := xs[j : j+4 : j+4]
			s0 += float32(cc[0]) * xx[0]
			s1 += float32(cc[1]) * xx[1]
			s2 += float32(cc[2]) * xx[2]
			s3 += float32(cc[3]) * xx[3]
		}
		acc += BF16ToF32(s) * ((s0 + s1) + (s2 + s3))
		bacc += BF16ToF32(biases[g]) * xsum[g]
	}
	return acc + bacc
}

// maxGoGroup bounds the group the portable dot4 decodes on the stack; larger groups
// (none in practice) take four dot1s.
const maxGoGroup = 256

// q4Dot4Go is four activation rows against one q4 row: each group's codes are unpacked
// once, then met by all four rows.
func q4Dot4Go(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
	if group > maxGoGroup {
		dot4ByRows(q4Dot1Go, codes, scales, biases, group, x, xStride, xsum4, out)
		return
	}
	var q [maxGoGroup]float32
	gb := group / 2
	codes = codes[:len(scales)*gb]
	dot4Groups(scales, biases, group, x, xStride, xsum4, out, func(g int, q []float32) {
		for j, c := range codes[g*gb : (g+1)*gb] {
			p := &nibblePairs[c]
			q[2*j], q[2*j+1] = p[0], p[1]
		}
	}, q[:group])
}

// q8Dot4Go is four activation rows against one q8 row.
func q8Dot4Go(codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
	if group > maxGoGroup {
		dot4ByRows(q8Dot1Go, codes, scales, biases, group, x, xStride, xsum4, out)
		return
	}
	var q [maxGoGroup]float32
	codes = codes[:len(scales)*group]
	dot4Groups(scales, biases, group, x, xStride, xsum4, out, func(g int, q []float32) {
		for j, c := range codes[g*group : (g+1)*group] {
			q[j] = float32(c)
		}
	}, q[:group])
}

// dot4Groups runs the group-sum dot of four activation rows against a row whose codes
// unpack(g, q) writes, group by group, as floats into q.
func dot4Groups(scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32,
	unpack func(g int, q []float32), q []float32) {
	K := len(scales) * group
	x0, x1, x2, x3 := x[:K], x[xStride:xStride+K], x[2*xStride:2*xStride+K], x[3*xStride:3*xStride+K]
	xsum4 = xsum4[:4*len(scales)]
	biases = biases[:len(scales)]
	var acc [4]float32
	for g, s := range scales {
		unpack(g, q)
		lo := g * group
		n := len(q)
		sc, b := BF16ToF32(s), BF16ToF32(biases[g])
		xs := xsum4[4*g : 4*g+4 : 4*g+4]
		acc[0] += sc*dot(q, x0[lo:lo+n]) + b*xs[0]
		acc[1] += sc*dot(q, x1[lo:lo+n]) + b*xs[1]
		acc[2] += sc*dot(q, x2[lo:lo+n]) + b*xs[2]
		acc[3] += sc*dot(q, x3[lo:lo+n]) + b*xs[3]
	}
	*out = acc
}

// dot4ByRows is dot4 as four dot1s (xsum4 transposed back per row).
func dot4ByRows(dot1 func([]byte, []uint16, []uint16, int, []float32, []float32) float32,
	codes []byte, scales, biases []uint16, group int, x []float32, xStride int, xsum4 []float32, out *[4]float32) {
	G := len(scales)
	xsum := make([]float32, G)
	for p := 0; p < 4; p++ {
		for g := range xsum {
			xsum[g] = xsum4[4*g+p]
		}
		out[p] = dot1(codes, scales, biases, group, x[p*xStride:p*xStride+G*group], xsum)
	}
}
