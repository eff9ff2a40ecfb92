package ops

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"pistil/graph"
)

// int8-activation q4 matmul for prefill: the activation rows are quantized per group of
// 64 (the weights' group) to int8 with a float32 scale, and each weight row's codes meet
// them in integer dot products (VPDPBUSD: unsigned 4-bit codes x signed 8-bit
// activations). With w = s·q + b per group and x ≈ x̂ = sx·xq,
//
//	Σ w·x ≈ Σ w·x̂ = Σ_g s_g·sx_g·(Σ q·xq) + b_g·sx_g·(Σ xq)
//
// where both integer sums are exact in int32: the result is the float32 product of the
// rounded activations, and the rounding of x to int8 (at most sx/2 = max|x|/254 per
// element) is all that separates it from the float32 path. The bias term must meet x̂,
// not the float Σ x: with Σ x the error is Σ s·q·(x̂ - x) instead of Σ w·(x̂ - x), and
// the codes q are 0..15 where a centred weight s·q + b is not, which made every
// matmul's rounding error 2-3x larger on the golden model (cpu/README.md).
//
// The kernel needs every 32-bit lane of an integer accumulator to hold products of one
// group, so that a whole block of groups is converted and scaled with one vector op per
// activation row. A q4 row stores each group as 32 contiguous bytes; the kernel transposes
// a block of 8 groups in registers (its 256 bytes as 4 vectors become 4 vectors whose
// qword lane j holds one qword of group order[j]) once per weight row, and the activations
// are stored in the matching order at quantization time, so the weights need no repack
// at load (a repack would be a second copy of the 19.5 GB checkpoint on a 24 GB machine).
//
// Activation layout, per row and block of 8 groups (int8Block bytes):
//
//	[0, 512)    vector v = 2k+h (k = 0..3, h = 0 low / 1 high nibble), byte 8j+i holds
//	            xq of group order[j], element 16k + 2i + h
//	[512, 576)  16 float32: lane L holds sx of group order[L/2]
//	[576, 640)  16 float32: lane L holds sx·Σxq of group order[L/2], halved (two lanes each)
//
// Rows are int8RowBytes(G) apart; the row count is padded to a multiple of eight with zero
// rows, and a last partial block with zero groups, which contribute exactly nothing.

// Activation choices for Env.Activations (and pipeline.toml [cpu] activations).
const (
	ActivationsF32  = "f32"  // float32 activations in every quantized matmul
	ActivationsInt8 = "int8" // int8 activations and integer dot products for prefill (T > 1)
	// ActivationsInt8All is int8 in decode's one-row matmuls too (q4Int8Dot1VNNI), where
	// the float32 kernels are bound by their decode work, not by the weights' bytes.
	ActivationsInt8All = "int8-all"
)

// CheckActivations names a bad activation choice ("" is float32).
func CheckActivations(choice string) error {
	switch choice {
	case "", ActivationsF32, ActivationsInt16, ActivationsInt8, ActivationsInt8All:
		return nil
	}
	return fmt.Errorf("activations %q: want %q, %q, %q or %q", choice, ActivationsF32, ActivationsInt16, ActivationsInt8, ActivationsInt8All)
}

// int8Activations reports whether env asks for int8 activations (never with the
// reference kernels).
func (e *Env) int8Activations() bool {
	return e != nil && (e.Activations == ActivationsInt8 || e.Activations == ActivationsInt8All) && !e.referenceKernels()
}

// int8Decode reports whether env asks for int8 activations in one-row matmuls as well.
func (e *Env) int8Decode() bool {
	return e.int8Activations() && e.Activations == ActivationsInt8All
}

const (
	int8Group      = 64                         // the only group size the layout takes
	int8Groups     = 8                          // groups per block
	int8CodeBytes  = int8Group / 2 * int8Groups // q4 code bytes of one row's block
	int8Block      = 640                        // activation bytes of one row's block
	int8RowsPerDot = 8                          // activation rows one kernel call meets
)

// int8Order is the group each qword lane of a transposed block holds (see the kernel).
var int8Order = [8]int{0, 4, 1, 5, 2, 6, 3, 7}

// int8Dot1 is one implementation of the one-row int8 kernel (decode): out[r] = the dot of
// the activation row acts (blocks blocks) with each of len(out) consecutive weight rows
// of blocks blocks each (codes, scales and biases of the rows back to back).
type int8Dot1 func(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32)

// int8Dot is one implementation of the int8 block kernel: it adds to out[p] the dot of
// activation row p (rows rowStride bytes apart, from acts) with blocks blocks of one q4
// weight row.
type int8Dot func(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32)

// int8DotTile is the block kernel over a tile of weight rows: it adds to out[r][p] the dot
// of activation row p (eight rows, rowStride bytes apart, from acts) with blocks blocks of
// weight row r, for r < len(out), the rows' codes codeStride bytes apart and their scales
// and biases groupStride groups apart (the same chunk of consecutive rows of a matrix):
// the Go call and the kernel's setup are paid once per tile, not once per weight row.
type int8DotTile func(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32)

// int8TileOf is the tile kernel of a kernel that has none of its own: k once per row.
func int8TileOf(k int8Dot) int8DotTile {
	return func(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride int, out [][8]float32) {
		checkInt8TileCall(codes, codeStride, scales, biases, groupStride, blocks, acts, rowStride, len(out))
		for r := range out {
			k(codes[r*codeStride:], scales[r*groupStride:], biases[r*groupStride:], blocks, acts, rowStride, &out[r])
		}
	}
}

// int8Kernel is the int8 kernel in use, int8KernelName its name: the fastest this machine
// has (set by the amd64 init), nil and "" where it has none (the float32 kernels then stay
// in use). int8KernelSets lists every kernel the machine can run, the portable one too.
// int8TileKernel is the tile kernel that comes with it (int8TileKernelSets by name).
var (
	int8Kernel         int8Dot
	int8KernelName     string
	int8KernelSets     = map[string]int8Dot{"go": q4Int8Dot8Go}
	int8TileKernel     int8DotTile
	int8TileKernelSets = map[string]int8DotTile{"go": int8TileOf(q4Int8Dot8Go)}
)

// int8TileWarmKernel is the tile kernel for the passes over a tile of weight rows after
// its first (the weights then sit in L2): a kernel that prefetches its weights from memory
// ("avx512vnni") names its twin without the prefetches here (int8TileWarmSets), since a
// prefetch of a line already cached still takes a load slot, and the dense projections'
// 64 passes over each tile were 4% slower with them (BenchmarkPrefillChunk/qmatmul). The
// same sums to the bit either way. Otherwise int8TileKernel.
var (
	int8TileWarmKernel int8DotTile
	int8TileWarmSets   = map[string]int8DotTile{}
)

// int8ExpertRows is the weight rows of one work item of the routed experts' int8 matmuls
// in prefill (experts with several rows; 0: expertRowBlock, 64), by kernel name
// (int8ExpertRowsSets). Longer items stream more of an expert's matrix in one run, which
// the weights' prefetches and the hardware's follow, and pay the driver's per-call setup
// and the last blocks' row-kernel passes less often: BenchmarkPrefillChunk, 2 workers,
// expert_down 351 -> 443-482 GFLOP/s and expert_qmatmul (gate) 472 -> 539 with 1,024
// rows against 64 (cpu/README.md, session 11). The same kernel meets every row with the
// same activations, and the SwiGLU still runs per 64 columns: the same bits.
var (
	int8ExpertRows     int
	int8ExpertRowsSets = map[string]int{}
)

// expertItemRows is the weight rows of one work item of a routed-expert matmul of T
// tokens whose activations are int8 (quantized) or not.
func expertItemRows(T int, quantized bool) int {
	if quantized && T > 1 && int8ExpertRows > 0 {
		return int8ExpertRows
	}
	return expertRowBlock
}

// int8StagedStores reports whether storeAcc writes a full block's sums through a staging
// buffer (int8StagedSets by kernel name): the eight activation rows' sums of 64 weight rows
// transposed into eight runs of 64 floats on the stack, then each run copied out whole.
// Storing them one float at a time into eight output rows put hundreds of stores in flight
// to lines not in the cache (the routed experts' down projection writes a [T·k, 2048]
// result, 32 MB for a 512-token chunk, 64 columns of 16-odd scattered rows at a time), and
// those stores were a quarter of that op's time in the full model; copied whole they are
// 8-16 times fewer (cpu/README.md, session 11). The same floats either way.
var (
	int8StagedStores bool
	int8StagedSets   = map[string]bool{}
)

// int8RowKernel is the one-row kernel of the int8 kernel in use, nil where that kernel
// has none (decode then keeps float32); int8RowKernelSets lists them by kernel name.
var (
	int8RowKernel     int8Dot1
	int8RowKernelSets = map[string]int8Dot1{"go": q4Int8Dot1Go}
)

// int8RowTails reports whether the kernel in use sends a last block of at most
// int8RowTailRows valid activation rows through its row kernel, one row at a time, rather
// than through the eight-row kernel with zero rows: the routed experts meet about 16 rows
// each (512 tokens x 8 of 256), so about half of them end in such a block, and on Zen 4
// the row kernel costs a quarter of the eight-row kernel per block. Kernels with a tile
// kernel of their own do (int8RowTailSets by name).
var (
	int8RowTails    bool
	int8RowTailSets = map[string]bool{}
)

// int8RowTailRows is the most valid rows of a last activation block that go through the
// row kernel: over 256 q4 rows of 2048 in L2 the VNNI row kernel takes about 8 us per
// activation row (BenchmarkInt8RowKernel), an eight-row pass 34-37 us
// (BenchmarkInt8TileKernel); AVX2 12 and 49.
const int8RowTailRows = 4

// int8Quantizers lists the vector quantizers (quantizeGroupFast) by the name of the int8
// kernel they come with: a kernel choice brings its machine's quantizer, so that
// PISTIL_CPU_INT8_KERNEL=avx2 runs what a machine without AVX-512 runs ("go": the loop).
var int8Quantizers = map[string]func(xs []float32, block []byte, j int){}

// int8FastestName is the kernel the amd64 init chose (its last added), "" where none.
var int8FastestName string

// FastestInt8Kernel names the kernel the int8 activations run unless SetInt8Kernel chose
// another: the fastest this machine has, "" where it has none.
func FastestInt8Kernel() string { return int8FastestName }

// Int8KernelName names the int8 kernel the int8 activations run on this machine, "" where
// there is none (the float32 kernels then run).
func Int8KernelName() string { return int8KernelName }

// SetInt8Kernel makes the int8 activations run the named kernel ("go", "avx2",
// "avx512vnni": those this machine has), process-wide: how the tests and benchmarks of a
// machine reach the kernels of machines with fewer features. "" is the machine's own
// choice, FastestInt8Kernel: on a machine with no int8 kernel of its own (arm64), none,
// so the float32 kernels run again after an earlier model chose "go".
func SetInt8Kernel(name string) error {
	if name == "" {
		name = int8FastestName
	}
	if name == "" {
		int8Kernel, int8KernelName, int8TileKernel, int8TileWarmKernel = nil, "", nil, nil
		int8StagedStores, int8ExpertRows, int8RowKernel, int8RowTails = false, 0, nil, false
		quantizeGroupFast = nil
		return nil
	}
	k, ok := int8KernelSets[name]
	if !ok {
		var names []string
		for n := range int8KernelSets {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("int8 kernel %q: this machine has %s", name, strings.Join(names, ", "))
	}
	int8Kernel, int8KernelName = k, name
	int8TileKernel = int8TileKernelSets[name]
	int8TileWarmKernel = int8TileKernel
	int8StagedStores = int8StagedSets[name]
	int8ExpertRows = int8ExpertRowsSets[name]
	if warm := int8TileWarmSets[name]; warm != nil {
		int8TileWarmKernel = warm
	}
	int8RowKernel = int8RowKernelSets[name]
	int8RowTails = int8RowTailSets[name]
	quantizeGroupFast = int8Quantizers[name]
	return nil
}

// addInt8Kernel lists a kernel of this machine, with its tile kernel (nil: k row by row),
// its row kernel and its quantizer (either may be nil), and makes it the one in use (the
// amd64 init adds them slowest first). A kernel with a tile kernel and a row kernel of
// its own takes short last blocks row by row (int8RowTails).
func addInt8Kernel(name string, k int8Dot, tile int8DotTile, row int8Dot1, quantize func(xs []float32, block []byte, j int)) {
	int8RowTailSets[name] = tile != nil && row != nil
	int8RowTails = int8RowTailSets[name]
	if tile == nil {
		tile = int8TileOf(k)
	}
	int8KernelSets[name], int8TileKernelSets[name] = k, tile
	int8Kernel, int8KernelName, int8TileKernel, int8TileWarmKernel = k, name, tile, tile
	int8StagedStores, int8ExpertRows = false, 0
	int8FastestName = name
	if row != nil {
		int8RowKernelSets[name] = row
	}
	int8RowKernel = row
	if quantize != nil {
		int8Quantizers[name] = quantize
	}
	quantizeGroupFast = quantize
}

// int8Fits reports whether the int8 path takes P rows against w under env.
func int8Fits(env *Env, w weightRows, P int) bool {
	if int8Kernel == nil || w.t.DType != graph.Q4 || w.t.Group != int8Group || !env.int8Activations() {
		return false
	}
	if P == 1 { // decode
		return env.int8Decode() && int8RowKernel != nil
	}
	return P > 1
}

// int8Blocks is the number of blocks of G groups (the last may be partial).
func int8Blocks(G int) int { return (G + int8Groups - 1) / int8Groups }

// int8RowBytes is the layout bytes of one activation row of G groups.
func int8RowBytes(G int) int { return int8Blocks(G) * int8Block }

// quantizeInt8Row writes row x (G groups of 64) into dst (int8RowBytes(G) bytes) in the
// kernel's layout.
func quantizeInt8Row(x []float32, G int, dst []byte) {
	clear(dst)
	for g := 0; g < G; g++ {
		xs := x[g*int8Group : (g+1)*int8Group : (g+1)*int8Group]
		if quantizeGroupFast != nil {
			blk := g / int8Groups
			quantizeGroupFast(xs, dst[blk*int8Block:(blk+1)*int8Block], int8Lane(g%int8Groups))
			continue
		}
		var amax float32
		for _, v := range xs {
			amax = max(amax, abs32(v))
		}
		if amax == 0 {
			continue // a zero group: zero codes, scale and sum
		}
		blk, j := g/int8Groups, int8Lane(g%int8Groups)
		base := dst[blk*int8Block : (blk+1)*int8Block : (blk+1)*int8Block]
		inv := 127 / amax
		var qsum int32
		for k := 0; k < 4; k++ {
			lo := base[2*k*64+8*j : 2*k*64+8*j+8 : 2*k*64+8*j+8]
			hi := base[(2*k+1)*64+8*j : (2*k+1)*64+8*j+8 : (2*k+1)*64+8*j+8]
			src := xs[16*k : 16*k+16 : 16*k+16]
			for i := range lo {
				a, b := roundInt8(src[2*i]*inv), roundInt8(src[2*i+1]*inv)
				lo[i], hi[i] = byte(a), byte(b)
				qsum += int32(a) + int32(b)
			}
		}
		// The bias term meets the rounded activations, sx·Σxq (see the top of the file).
		sx := amax / 127
		scales, sums := f32s(base[512:576]), f32s(base[576:640])
		scales[2*j], scales[2*j+1] = sx, sx
		sums[2*j], sums[2*j+1] = float32(qsum)*sx/2, float32(qsum)*sx/2
	}
}

// quantizeGroupFast, where the int8 kernel in use has one (int8Quantizers), is
// quantizeInt8Row's work for one group (xs, 64 elements) into lane j of its block
// (int8Block bytes, cleared), in vector registers: the same bytes and floats as the loop
// (TestQuantizeInt8GroupFastMatchesGo).
var quantizeGroupFast func(xs []float32, block []byte, j int)

// int8Lane is the qword lane that holds group g (0..7) of a block: the inverse of
// int8Order.
func int8Lane(g int) int {
	for j, o := range int8Order {
		if o == g {
			return j
		}
	}
	panic("ops: group index outside a block")
}

// roundInt8 rounds v (|v| <= 127 by construction) to the nearest integer, halves to
// even: adding 1.5·2^23 leaves the rounded integer in the low mantissa bits.
func roundInt8(v float32) int8 {
	return int8(int32(math.Float32bits(v+0x1.8p23)) - 0x4b400000)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// prepareInt8 fills a's int8 layout from P rows of x (row(p)), splitting the rows over
// env's workers.
func prepareInt8(env *Env, a *quantActs, G int, row func(p int) []float32) {
	rowBytes := int8RowBytes(G)
	a.int8 = growBytes(&a.buf.int8, int8PaddedRows(a.P)*rowBytes)
	clear(a.int8[a.P*rowBytes:])
	prepare := func(lo, hi int) {
		for p := lo; p < hi; p++ {
			quantizeInt8Row(row(p)[:a.K], G, a.int8[p*rowBytes:(p+1)*rowBytes])
		}
	}
	if a.P*a.K >= 1<<16 {
		parallelRange(env, a.P, prepare)
	} else {
		prepare(0, a.P)
	}
}

// int8PaddedRows is the rows of P activation rows' layout: a multiple of the block
// kernel's eight, or the one row of the row kernel.
func int8PaddedRows(P int) int {
	if P == 1 {
		return 1
	}
	return (P + int8RowsPerDot - 1) / int8RowsPerDot * int8RowsPerDot
}

// growBytes returns (*buf)[:n], reallocating when it is too short.
func growBytes(buf *[]byte, n int) []byte {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return (*buf)[:n]
}

// int8ChunkBlocks bounds the blocks one kernel call covers: eight rows of them (5 KiB a
// block) stay in the L1 cache while a tile of weight rows sweeps them.
const int8ChunkBlocks = 4

// mulQuantInt8 is mulQuant for an int8-prepared a: weight rows in L2-sized tiles, each
// tile through the tile kernel eight activation rows at a time (one call per run of rows
// that lie back to back), long rows in chunks of int8ChunkBlocks blocks.
func mulQuantInt8(a *quantActs, w weightRows, rowBase, lo, hi int, dst outRows) {
	G := a.K / int8Group
	B, full := int8Blocks(G), G/int8Groups
	rowBytes := int8RowBytes(G)
	data0, _, _ := w.locate(rowBase + lo)
	tile := max(16, (256<<10)/(len(data0)+4*G))
	sums := int8SumsPool.Get().(*int8Sums)
	defer int8SumsPool.Put(sums)
	acc := sums.grow(min(tile, hi-lo))
	var tail int8Tail
	for r0 := lo; r0 < hi; r0 += tile {
		r1 := min(r0+tile, hi)
		for p0 := 0; p0 < a.P; p0 += int8RowsPerDot {
			if valid := a.P - p0; int8RowTails && valid <= int8RowTailRows && full == B {
				for p := p0; p < a.P; p++ {
					mulQuantInt8RowTo(a, p, w, rowBase, r0, r1, dst(p)[r0:r1])
				}
				continue
			}
			rows := a.int8[p0*rowBytes:]
			acc := acc[:r1-r0]
			clear(acc)
			kernel := int8TileKernel // the first pass meets the tile's weights in memory
			if p0 > 0 {
				kernel = int8TileWarmKernel
			}
			for b0 := 0; b0 < full; b0 += int8ChunkBlocks {
				nb := min(int8ChunkBlocks, full-b0)
				acts := rows[b0*int8Block:]
				for r := r0; r < r1; {
					n := r1 - r
					if w.t.Stride0 != 0 {
						n = min(n, w.rowsPerSlice-(rowBase+r)%w.rowsPerSlice)
					}
					codes, scales, biases := w.locateRun(rowBase+r, n)
					kernel(codes[b0*int8CodeBytes:], G*int8Group/2, scales[b0*int8Groups:], biases[b0*int8Groups:], G,
						nb, acts, rowBytes, acc[r-r0:r-r0+n])
					r += n
				}
			}
			if full < B { // a last partial block: its groups copied into a zero-padded one
				acts := rows[full*int8Block:]
				for r := r0; r < r1; r++ {
					codes, scales, biases := w.locate(rowBase + r)
					tail.fill(codes[full*int8CodeBytes:], scales[full*int8Groups:], biases[full*int8Groups:])
					int8Kernel(tail.codes[:], tail.scales[:], tail.biases[:], 1, acts, rowBytes, &acc[r-r0])
				}
			}
			storeAcc(acc, p0, min(int8RowsPerDot, a.P-p0), r0, dst, int8StagedStores)
		}
	}
}

// int8Sums is a tile's sums, pooled: a prefill chunk's routed experts make tens of
// thousands of mulQuantInt8 calls, and a fresh slice each was 10% of the down
// projection's time, in allocating and clearing new memory.
type int8Sums struct{ acc [][8]float32 }

var int8SumsPool = sync.Pool{New: func() any { return &int8Sums{} }}

// grow returns s's first n sums (stale: mulQuantInt8 clears them).
func (s *int8Sums) grow(n int) [][8]float32 {
	if cap(s.acc) < n {
		s.acc = make([][8]float32, n)
	}
	return s.acc[:n]
}

// int8RowRun is the most weight rows one call of the row kernel covers: enough to make
// the call's cost vanish beside the rows' bytes (a routed expert's down projection has
// rows of 288 bytes), few enough for the results to sit on the stack.
const int8RowRun = 64

// mulQuantInt8RowTo is mulQuantInt8 for activation row p alone (decode, and short last
// blocks), writing weight row r's result to dst[r-lo]: the weight rows stream through the
// row kernel in runs of consecutive rows, never crossing a slice of a strided stack.
func mulQuantInt8RowTo(a *quantActs, p int, w weightRows, rowBase, lo, hi int, dst []float32) {
	G := a.K / int8Group
	blocks := G / int8Groups
	acts := a.int8[p*int8RowBytes(G):]
	if blocks*int8Groups < G {
		mulQuantInt8RowTail(acts, a.K, w, rowBase, lo, hi, dst)
		return
	}
	for r0 := lo; r0 < hi; {
		n := min(int8RowRun, hi-r0)
		if w.t.Stride0 != 0 {
			n = min(n, w.rowsPerSlice-(rowBase+r0)%w.rowsPerSlice)
		}
		codes, scales, biases := w.locateRun(rowBase+r0, n)
		int8RowKernel(codes, scales, biases, blocks, acts, dst[r0-lo:r0-lo+n])
		r0 += n
	}
}

// mulQuantInt8RowTo for rows that end in a partial block (the tiny models' K = 192): rows
// are then not whole blocks apart, so the row kernel takes one row at a time, its whole
// blocks and then its last block copied into a zero-padded one, as mulQuantInt8 does.
func mulQuantInt8RowTail(acts []byte, K int, w weightRows, rowBase, lo, hi int, dst []float32) {
	full := K / int8Group / int8Groups
	sc := int8RowTailPool.Get().(*int8RowTailScratch)
	defer int8RowTailPool.Put(sc)
	tail, last := &sc.tail, sc.last[:]
	for r := lo; r < hi; r++ {
		codes, scales, biases := w.locate(rowBase + r)
		out := dst[r-lo : r-lo+1]
		out[0] = 0
		if full > 0 {
			int8RowKernel(codes, scales, biases, full, acts, out)
		}
		tail.fill(codes[full*int8CodeBytes:], scales[full*int8Groups:], biases[full*int8Groups:])
		int8RowKernel(tail.codes[:], tail.scales[:], tail.biases[:], 1, acts[full*int8Block:], last)
		out[0] += last[0]
	}
}

// checkInt8RowCall panics unless a row kernel call's slices hold what it reads.
func checkInt8RowCall(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	rows := len(out)
	if blocks <= 0 || rows == 0 || len(codes) < rows*blocks*int8CodeBytes || len(scales) < rows*blocks*int8Groups ||
		len(biases) < rows*blocks*int8Groups || len(acts) < blocks*int8Block {
		panic("ops: int8 row kernel called with a short row")
	}
}

// q4Int8Dot1Go is the portable one-row kernel, the oracle of the assembly: per weight
// row, q4Int8Dot8Go's sums for the one activation row.
func q4Int8Dot1Go(codes []byte, scales, biases []uint16, blocks int, acts []byte, out []float32) {
	checkInt8RowCall(codes, scales, biases, blocks, acts, out)
	for r := range out {
		var sum float32
		for b := 0; b < blocks; b++ {
			rb := r*blocks + b
			sum += int8BlockDot(codes[rb*int8CodeBytes:(rb+1)*int8CodeBytes], acts[b*int8Block:(b+1)*int8Block],
				scales[rb*int8Groups:(rb+1)*int8Groups], biases[rb*int8Groups:(rb+1)*int8Groups])
		}
		out[r] = sum
	}
}

// int8BlockDot is one block of a weight row (its codes cb, its groups' bf16 scales and
// biases) against one block of int8 activations blk: exact in the integer part, each
// group's scale terms in float32.
func int8BlockDot(cb, blk []byte, scales, biases []uint16) float32 {
	sx, xs := f32s(blk[512:576]), f32s(blk[576:640])
	var sum float32
	for j := 0; j < int8Groups; j++ {
		g := int8Order[j]
		var isum int32
		for k := 0; k < 4; k++ {
			for i := 0; i < 8; i++ {
				c := cb[g*32+8*k+i]
				isum += int32(c&15)*int32(int8(blk[(2*k)*64+8*j+i])) +
					int32(c>>4)*int32(int8(blk[(2*k+1)*64+8*j+i]))
			}
		}
		sum += float32(isum)*sx[2*j]*BF16ToF32(scales[g]) + BF16ToF32(biases[g])*(xs[2*j]+xs[2*j+1])
	}
	return sum
}

// int8RowTailScratch is mulQuantInt8RowTail's padded block and sum, pooled: handed to the
// row kernel (a function value) they would escape to the heap on every call.
type int8RowTailScratch struct {
	tail int8Tail
	last [1]float32
}

var int8RowTailPool = sync.Pool{New: func() any { return new(int8RowTailScratch) }}

// int8Tail is a partial block of one weight row padded with zero groups.
type int8Tail struct {
	codes          [int8CodeBytes]byte
	scales, biases [int8Groups]uint16
}

func (t *int8Tail) fill(codes []byte, scales, biases []uint16) {
	*t = int8Tail{}
	copy(t.codes[:], codes)
	copy(t.scales[:], scales)
	copy(t.biases[:], biases)
}

// checkInt8TileCall panics unless a tile kernel call's slices hold what it reads for
// rows weight rows.
func checkInt8TileCall(codes []byte, codeStride int, scales, biases []uint16, groupStride, blocks int, acts []byte, rowStride, rows int) {
	if rows == 0 {
		return
	}
	last := rows - 1
	if codeStride < blocks*int8CodeBytes || groupStride < blocks*int8Groups ||
		len(codes) < last*codeStride+blocks*int8CodeBytes || len(scales) < last*groupStride+blocks*int8Groups ||
		len(biases) < last*groupStride+blocks*int8Groups {
		panic("ops: int8 tile kernel called with short rows")
	}
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
}

// checkInt8Call panics unless a kernel call's slices hold what it reads (a bug in the
// caller, caught in Go before the assembly reads past an end).
func checkInt8Call(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int) {
	if blocks <= 0 || len(codes) < blocks*int8CodeBytes || len(scales) < blocks*int8Groups ||
		len(biases) < blocks*int8Groups || rowStride < blocks*int8Block ||
		len(acts) < (int8RowsPerDot-1)*rowStride+blocks*int8Block {
		panic("ops: int8 kernel called with a short row")
	}
}

// q4Int8Dot8Go is the portable int8 kernel: the same layout and the same integer sums as
// the assembly, one lane at a time (the oracle the assembly is tested against, and a
// reading of the layout).
func q4Int8Dot8Go(codes []byte, scales, biases []uint16, blocks int, acts []byte, rowStride int, out *[8]float32) {
	checkInt8Call(codes, scales, biases, blocks, acts, rowStride)
	for b := 0; b < blocks; b++ {
		cb := codes[b*int8CodeBytes : (b+1)*int8CodeBytes]
		for p := 0; p < int8RowsPerDot; p++ {
			blk := acts[p*rowStride+b*int8Block : p*rowStride+(b+1)*int8Block]
			out[p] += int8BlockDot(cb, blk, scales[b*int8Groups:(b+1)*int8Groups], biases[b*int8Groups:(b+1)*int8Groups])
		}
	}
}

// int8Source is activation rows quantized once in the int8 layout and then gathered for
// several matmuls: the routed experts meet every token's row up to k times per projection,
// and quantizing it once per token instead of once per routed row halves nothing of the
// kernels but most of the preparation.
type int8Source struct {
	rows     []byte
	rowBytes int
	K        int
}

// int8SourcePool recycles int8Sources and their rows: the MoE block of every decode step
// quantizes its input rows afresh, and rows in newly allocated memory took their page faults
// in the quantizer (1.3% of an int8-all decode of the full model).
var int8SourcePool = sync.Pool{New: func() any { return &int8Source{} }}

// newInt8Source quantizes the n rows row(s) returns for w's kernels, split over env's
// workers. release hands it back once its rows are gathered.
func newInt8Source(env *Env, w weightRows, n int, row func(s int) []float32) *int8Source {
	G := w.cols / int8Group
	s := int8SourcePool.Get().(*int8Source)
	s.rowBytes, s.K = int8RowBytes(G), w.cols
	s.rows = growBytes(&s.rows, n*s.rowBytes)
	parallelRange(env, n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			quantizeInt8Row(row(i)[:s.K], G, s.rows[i*s.rowBytes:(i+1)*s.rowBytes])
		}
	})
	return s
}

// gather returns the P rows src(p) as prepared activations for w, zero-padded to a
// multiple of eight rows when there is more than one.
func (s *int8Source) gather(w weightRows, P int, src func(p int) int) *quantActs {
	buf, _ := actsPool.Get().(*actsBuffers)
	if buf == nil {
		buf = &actsBuffers{}
	}
	a := &buf.acts
	*a = quantActs{k: kernelsFor(w.t.Group), bits: bitsIndex(w.t.DType), P: P, K: s.K, buf: buf}
	a.int8 = growBytes(&a.buf.int8, int8PaddedRows(P)*s.rowBytes)
	for p := 0; p < P; p++ {
		i := src(p)
		copy(a.int8[p*s.rowBytes:(p+1)*s.rowBytes], s.rows[i*s.rowBytes:(i+1)*s.rowBytes])
	}
	clear(a.int8[P*s.rowBytes:])
	return a
}

// release hands s back to int8SourcePool; s must not be used after it (the quantActs its
// gathers made keep their own copies).
func (s *int8Source) release() {
	if s != nil {
		int8SourcePool.Put(s)
	}
}
