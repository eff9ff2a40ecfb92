package ops

import (
	"fmt"
	"unsafe"

	"pistil/graph"
)

// Fast weight-row access for the matmul-like references. Tensor.Row is the general,
// obviously-correct decoder; these paths do the same work a group or a word at a time and
// add the quantized dot product that never materializes the row. The byte views assume a
// little-endian host (amd64, arm64), as the MLX and safetensors formats do.

// weightRows reads rows of a weight (2-D, or a stack flattened to rows) of cols elements.
type weightRows struct {
	t            *Tensor
	cols         int
	rowsPerSlice int // rows per Stride0 slice of a non-contiguous stack
	// reference selects the plain paths below over the fast kernels of qkernels.go
	// (Env.Kernels = "reference"); see forEnv.
	reference bool
}

// forEnv returns w set to the kernels env asks for.
func (w weightRows) forEnv(env *Env) weightRows {
	w.reference = env.referenceKernels()
	return w
}

func newWeightRows(t *Tensor) (weightRows, error) {
	if len(t.Shape) < 2 {
		return weightRows{}, fmt.Errorf("weight of shape %v is not a matrix", t.Shape)
	}
	w := weightRows{t: t, cols: t.Shape[len(t.Shape)-1], rowsPerSlice: 1}
	for _, d := range t.Shape[1 : len(t.Shape)-1] {
		w.rowsPerSlice *= d
	}
	switch t.DType {
	case graph.F32, graph.BF16, graph.F16:
	case graph.Q4, graph.Q8:
		if t.Group <= 0 || t.Group%8 != 0 || w.cols%t.Group != 0 {
			return weightRows{}, fmt.Errorf("quantized weight %v: group %d must be a multiple of 8 dividing the row length %d", t.Shape, t.Group, w.cols)
		}
	default:
		return weightRows{}, fmt.Errorf("weight dtype %s is not a float or quantized type", t.DType)
	}
	need := w.storage()
	if len(t.Data) < need.data || len(t.Scales) < need.groups*2 || len(t.Biases) < need.groups*2 {
		return weightRows{}, fmt.Errorf("weight %s%v holds %d bytes (%d scale, %d bias), needs %d (%d, %d)",
			t.DType, t.Shape, len(t.Data), len(t.Scales), len(t.Biases), need.data, need.groups*2, need.groups*2)
	}
	return w, nil
}

type weightStorage struct{ data, groups int }

// storage is the bytes (and scale/bias groups) the tensor must hold, honouring Stride0.
func (w weightRows) storage() weightStorage {
	t := w.t
	rowBytes := w.cols * t.DType.Bits() / 8
	groupsPerRow := 0
	if t.DType.Quantized() {
		groupsPerRow = w.cols / t.Group
	}
	if t.Stride0 == 0 {
		n := w.rows()
		return weightStorage{n * rowBytes, n * groupsPerRow}
	}
	slices := t.Shape[0]
	if slices == 0 {
		return weightStorage{}
	}
	return weightStorage{(slices-1)*t.Stride0 + w.rowsPerSlice*rowBytes,
		(slices-1)*t.Stride0Groups + w.rowsPerSlice*groupsPerRow}
}

// rows is the number of rows.
func (w weightRows) rows() int { return w.t.Elements() / w.cols }

// locate returns row r's bytes and, for quantized weights, its scales and biases.
func (w weightRows) locate(r int) (data []byte, scales, biases []uint16) {
	t := w.t
	base, gbase := 0, 0
	if t.Stride0 != 0 {
		slice := r / w.rowsPerSlice
		base, gbase = slice*t.Stride0, slice*t.Stride0Groups
		r %= w.rowsPerSlice
	}
	rowBytes := w.cols * t.DType.Bits() / 8
	data = t.Data[base+r*rowBytes : base+(r+1)*rowBytes]
	if t.DType.Quantized() {
		g := w.cols / t.Group
		off := gbase + r*g
		scales = u16(t.Scales)[off : off+g]
		biases = u16(t.Biases)[off : off+g]
	}
	return data, scales, biases
}

// runInSlice says whether the n consecutive rows from r lie in one slice of a strided
// stack (always, for a weight that is not one), as locateRun needs.
func (w weightRows) runInSlice(r, n int) bool {
	return w.t.Stride0 == 0 || r/w.rowsPerSlice == (r+n-1)/w.rowsPerSlice
}

// locateRun is locate for the n consecutive rows from r, which must lie in one slice of a
// strided stack: their bytes, scales and biases back to back.
func (w weightRows) locateRun(r, n int) (data []byte, scales, biases []uint16) {
	t := w.t
	base, gbase := 0, 0
	if t.Stride0 != 0 {
		slice := r / w.rowsPerSlice
		if (r+n-1)/w.rowsPerSlice != slice {
			panic("ops: a run of weight rows crosses a slice of a strided stack")
		}
		base, gbase = slice*t.Stride0, slice*t.Stride0Groups
		r %= w.rowsPerSlice
	}
	rowBytes := w.cols * t.DType.Bits() / 8
	data = t.Data[base+r*rowBytes : base+(r+n)*rowBytes]
	if t.DType.Quantized() {
		g := w.cols / t.Group
		scales = u16(t.Scales)[gbase+r*g : gbase+(r+n)*g]
		biases = u16(t.Biases)[gbase+r*g : gbase+(r+n)*g]
	}
	return data, scales, biases
}

// f32View returns row r of an F32 weight without copying, or nil for other dtypes.
func (w weightRows) f32View(r int) []float32 {
	if w.t.DType != graph.F32 {
		return nil
	}
	data, _, _ := w.locate(r)
	return f32s(data)
}

// decode writes row r as float32 into dst[:cols].
func (w weightRows) decode(r int, dst []float32) {
	data, scales, biases := w.locate(r)
	dst = dst[:w.cols]
	switch w.t.DType {
	case graph.F32:
		copy(dst, f32s(data))
	case graph.BF16:
		bf16ToF32Row(dst, u16(data))
	case graph.F16:
		for i, h := range u16(data) {
			dst[i] = F16ToF32(h)
		}
	case graph.Q4:
		gs := w.t.Group
		for g := range scales {
			s, b := BF16ToF32(scales[g]), BF16ToF32(biases[g])
			codes := data[g*gs/2 : (g+1)*gs/2]
			out := dst[g*gs : (g+1)*gs]
			for j, c := range codes {
				out[2*j] = s*float32(c&15) + b
				out[2*j+1] = s*float32(c>>4) + b
			}
		}
	case graph.Q8:
		gs := w.t.Group
		for g := range scales {
			s, b := BF16ToF32(scales[g]), BF16ToF32(biases[g])
			codes := data[g*gs : (g+1)*gs]
			out := dst[g*gs : (g+1)*gs]
			for j, c := range codes {
				out[j] = s*float32(c) + b
			}
		}
	}
}

// groupSums returns, for each group of x, the sum of its elements: the bias term of every
// quantized row's dot product with x, computed once per x and reused for all rows.
func groupSums(x []float32, group int, dst []float32) []float32 {
	dst = dst[:0]
	for g := 0; g+group <= len(x); g += group {
		var s0, s1, s2, s3 float32
		xs := x[g : g+group]
		for j := 0; j+3 < len(xs); j += 4 {
			s0 += xs[j]
			s1 += xs[j+1]
			s2 += xs[j+2]
			s3 += xs[j+3]
		}
		dst = append(dst, (s0+s1)+(s2+s3))
	}
	return dst
}

// nibblePairs[b] is the two 4-bit codes of byte b as float32, low nibble first.
var nibblePairs = func() (t [256][2]float32) {
	for b := range t {
		t[b] = [2]float32{float32(b & 15), float32(b >> 4)}
	}
	return t
}()

// dotQuant is x · row r of a quantized weight without decoding the row:
// Σ_g s_g·Σ_{j∈g} q_j x_j + b_g·Σ_{j∈g} x_j, with xsum the group sums of x.
func (w weightRows) dotQuant(r int, x, xsum []float32) float32 {
	data, scales, biases := w.locate(r)
	gs := w.t.Group
	var acc float32
	if w.t.DType == graph.Q4 {
		for g := range scales {
			codes := data[g*gs/2 : (g+1)*gs/2]
			xs := x[g*gs : (g+1)*gs]
			var s0, s1, s2, s3 float32
			// Each byte holds two codes, low nibble first; the table turns a byte into both
			// as floats with one load (cheaper than two int-to-float conversions).
			for j := 0; j+2 <= len(codes); j += 2 {
				lo, hi := &nibblePairs[codes[j]], &nibblePairs[codes[j+1]]
				xx := xs[2*j : 2*j+4 : 2*j+4]
				s0 += lo[0] * xx[0]
				s1 += lo[1] * xx[1]
				s2 += hi[0] * xx[2]
				s3 += hi[1] * xx[3]
			}
			acc += BF16ToF32(scales[g])*((s0+s1)+(s2+s3)) + BF16ToF32(biases[g])*xsum[g]
		}
		return acc
	}
	for g := range scales {
		codes := data[g*gs : (g+1)*gs]
		xs := x[g*gs : (g+1)*gs]
		var s0, s1, s2, s3 float32
		for j := 0; j+3 < len(codes); j += 4 {
			xx := xs[j : j+4]
			s0 += float32(codes[j]) * xx[0]
			s1 += float32(codes[j+1]) * xx[1]
			s2 += float32(codes[j+2]) * xx[2]
			s3 += float32(codes[j+3]) * xx[3]
		}
		acc += BF16ToF32(scales[g])*((s0+s1)+(s2+s3)) + BF16ToF32(biases[g])*xsum[g]
	}
	return acc
}

// dot is a·b with four accumulators (len(a) == len(b)).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+3 < len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy adds a·x to y.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// quantDotMaxRows is the most activation rows for which a quantized matmul uses the
// group-sum dot per row; with more rows, decoding each weight row once into scratch and
// reusing it across the rows is cheaper.
const quantDotMaxRows = 3

// mulRows computes y[p*yStride + r] = x[p] · w.row(rowBase + r) for p < P, r < M, split
// over r across workers. x is P rows of K = w.cols. env also picks the kernels.
func mulRows(env *Env, x []float32, P int, w weightRows, rowBase, M int, y []float32, yStride int) {
	w = w.forEnv(env)
	if w.t.DType.Quantized() && !w.reference {
		acts := prepareActs(env, w, x, P)
		if P == 1 && decodeRegions.Load() {
			parallelBalanced(env, M, func(_, lo, hi int) { mulQuantRow(acts, w, rowBase, lo, hi, y[lo:hi]) })
			acts.release()
			return
		}
		parallelRange(env, M, func(lo, hi int) {
			if P == 1 {
				mulQuantRow(acts, w, rowBase, lo, hi, y[lo:hi])
				return
			}
			mulQuant(acts, w, rowBase, lo, hi, func(p int) []float32 { return y[p*yStride : p*yStride+M] })
		})
		acts.release()
		return
	}
	xsums := quantGroupSums(w, x, P)
	parallelRange(env, M, func(lo, hi int) {
		mulBlock(x, P, xsums, w, rowBase, lo, hi, newRowScratch(w, xsums), func(p int) []float32 {
			return y[p*yStride : p*yStride+M]
		})
	})
}

// quantGroupSums returns the group sums of each x row when the reference kernels' group-sum
// dot is the faster path (few rows), nil otherwise. The fast kernels need none: mulBlock
// prepares its own.
func quantGroupSums(w weightRows, x []float32, P int) [][]float32 {
	if !w.t.DType.Quantized() || P > quantDotMaxRows || !w.reference {
		return nil
	}
	K := w.cols
	xsums := make([][]float32, P)
	for p := range xsums {
		xsums[p] = groupSums(x[p*K:(p+1)*K], w.t.Group, nil)
	}
	return xsums
}

// rowTile is how many weight rows mulBlock decodes before sweeping the activation rows:
// each activation row is then loaded once per tile instead of once per weight row, which
// matters in prefill where the activations outgrow the caches.
const rowTile = 8

// newRowScratch allocates the decode buffer a worker needs (rowTile rows), or nil when
// rows are never decoded (group-sum dot, fast quantized kernels).
func newRowScratch(w weightRows, xsums [][]float32) []float32 {
	if xsums != nil || (w.t.DType.Quantized() && !w.reference) {
		return nil
	}
	return make([]float32, rowTile*w.cols)
}

// mulBlock computes x[p] · w.row(rowBase + r) for r in [lo, hi) and every p < P into
// dst(p)[r]. Decoded weight rows are reused across all P activation rows.
// scratch holds rowTile decoded rows (unused on the group-sum path). A quantized w not set
// to the reference kernels (forEnv) goes to the fast kernels, which prepare x themselves:
// callers that cover a matrix in several blocks do better with prepareActs and mulQuant.
func mulBlock(x []float32, P int, xsums [][]float32, w weightRows, rowBase, lo, hi int, scratch []float32, dst outRows) {
	K := w.cols
	if w.t.DType.Quantized() && !w.reference {
		acts := prepareActs(nil, w, x, P)
		mulQuant(acts, w, rowBase, lo, hi, dst)
		acts.release()
		return
	}
	if xsums != nil {
		for r := lo; r < hi; r++ {
			for p := 0; p < P; p++ {
				dst(p)[r] = w.dotQuant(rowBase+r, x[p*K:(p+1)*K], xsums[p])
			}
		}
		return
	}
	var tile [rowTile][]float32
	for r0 := lo; r0 < hi; r0 += rowTile {
		n := min(rowTile, hi-r0)
		for i := 0; i < n; i++ {
			if tile[i] = w.f32View(rowBase + r0 + i); tile[i] == nil {
				tile[i] = scratch[i*K : (i+1)*K]
				w.decode(rowBase+r0+i, tile[i])
			}
		}
		for p := 0; p < P; p++ {
			xr, out := x[p*K:(p+1)*K], dst(p)
			for i := 0; i < n; i++ {
				out[r0+i] = dot(xr, tile[i])
			}
		}
	}
}

// f32s views bytes as float32 without copying.
func f32s(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// u16 views bytes as uint16 without copying.
func u16(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// floats returns a dense float tensor's elements as float32: a view of an F32 tensor, a
// decoded copy of a BF16 or F16 one (small vectors: norm weights, biases).
func floats(t *Tensor) ([]float32, error) {
	if t.DType == graph.F32 {
		return t.F32(), nil
	}
	n, err := halfElements(t)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	decodeHalves(out, t)
	return out, nil
}

// floatsScratch is floats with a bf16 or f16 tensor decoded into pooled scratch (valid
// until release) instead of a new slice: a decode step's norms decode their 2,048-wide
// bf16 weights some eighty times, and the fresh slices cost more than the norms (on the
// full model 0.29 s of add_rms_norm's 0.33 s in a profile of 128 decode steps, the
// decoding's stores meeting pages the collector had returned; cpu/README.md, session 13).
func floatsScratch(t *Tensor) (f []float32, release func(), err error) {
	if t.DType == graph.F32 {
		return t.F32(), func() {}, nil
	}
	n, err := halfElements(t)
	if err != nil {
		return nil, nil, err
	}
	buf, release := scratchF32(n)
	decodeHalves(buf.F32(), t)
	return buf.F32(), release, nil
}

// halfElements is the element count of a BF16 or F16 tensor, or an error for another
// dtype or too few bytes.
func halfElements(t *Tensor) (int, error) {
	if t.DType != graph.BF16 && t.DType != graph.F16 {
		return 0, fmt.Errorf("%s tensor %v is not a dense float tensor", t.DType, t.Shape)
	}
	n := t.Elements()
	if len(t.Data) < 2*n {
		return 0, fmt.Errorf("%s tensor %v holds %d bytes, needs %d", t.DType, t.Shape, len(t.Data), 2*n)
	}
	return n, nil
}

// decodeHalves widens the len(dst) BF16 or F16 elements of t into dst.
func decodeHalves(dst []float32, t *Tensor) {
	src := u16(t.Data)[:len(dst)]
	if t.DType == graph.BF16 {
		bf16ToF32Row(dst, src)
		return
	}
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

// stateRows gives float32 access to the rows of a state tensor (KV cache, conv state)
// stored as F32 or BF16; writes round to the storage dtype.
type stateRows struct {
	t    *Tensor
	cols int
}

func (s stateRows) read(r int, dst []float32) {
	if s.t.DType == graph.F32 {
		copy(dst[:s.cols], s.t.F32()[r*s.cols:(r+1)*s.cols])
		return
	}
	bf16ToF32Row(dst[:s.cols], u16(s.t.Data)[r*s.cols:(r+1)*s.cols])
}

func (s stateRows) write(r int, src []float32) {
	if s.t.DType == graph.F32 {
		copy(s.t.F32()[r*s.cols:(r+1)*s.cols], src[:s.cols])
		return
	}
	dst := u16(s.t.Data)[r*s.cols : (r+1)*s.cols]
	for i := range dst {
		dst[i] = F32ToBF16(src[i])
	}
}

// stateDTypes are the storage types of the KV cache and the conv state.
var stateDTypes = []graph.DType{graph.F32, graph.BF16}
