package ops

import (
	"fmt"

	"pistil/graph"
)

// Causal depthwise 1-D convolution with carried state: the Gated DeltaNet short conv. The
// state holds the last K-1 raw input rows of earlier steps (zeros at session start).

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "conv1d",
			Doc:  "causal depthwise conv of x f32[T,Ch] over concat(state[K-1,Ch], x) with w[Ch,K] -> (y f32[T,Ch], state')",
			Args: 3, Flags: graph.StateUpdate, Infer: inferConv1D},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			c := plainCost(v, b, 0)
			x, w := arg(v, 0), arg(v, 2)
			c.Flops = 2 * elemsOf(x, b) * int64(w.Shape[1].Eval(b))
			return c
		},
		Ref: refConv1D,
	})
}

func inferConv1D(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 3); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "x", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	state, err := wantRank(v, 1, "state", 2, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := wantRank(v, 2, "w", 2, floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("channels (x vs w)", x.Shape[1], w.Shape[0]); err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("channels (x vs state)", x.Shape[1], state.Shape[1]); err != nil {
		return graph.Type{}, err
	}
	k, err := constDim("conv kernel", w.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	if k < 1 || state.Shape[0] != graph.D(k-1) {
		return graph.Type{}, fmt.Errorf("state has %s rows, want kernel-1 = %d", state.Shape[0], k-1)
	}
	return graph.Tuple(x, state), nil
}

func refConv1D(env *Env, v *graph.Value, in, out []*Tensor) error {
	rows, release, err := convolve(env, in[0], in[1], in[2], out[0])
	if err != nil {
		return err
	}
	defer release()
	T, hist := in[0].Shape[0], in[1].Shape[0]
	next := stateRows{t: out[1], cols: rows.ch}
	for r := 0; r < hist; r++ {
		next.write(r, rows.row(T+r))
	}
	return nil
}

// convRows are the rows of [state; x] a convolution reads: the state's hist rows and x's
// first ones (up to hist) copied into float32 scratch, read in full first (the state may
// alias its update), and x's rows after those in place, not copied (a 512-token chunk's
// 16 MB copy was a fifth of the op's time). A decode step's one token over a float32
// state reads the state in place too (state set, head nil): the convolution is done
// before its caller writes the state's update.
type convRows struct {
	head     []float32 // rows [0, hist+min(T, hist)): the state, then x's first rows
	state    []float32 // with no head: the state's hist rows
	x        []float32
	hist, ch int
}

// row is row r of [state; x].
func (c convRows) row(r int) []float32 {
	if c.head == nil && r < c.hist {
		return c.state[r*c.ch : (r+1)*c.ch]
	}
	if r < len(c.head)/c.ch {
		return c.head[r*c.ch : (r+1)*c.ch]
	}
	return c.x[(r-c.hist)*c.ch : (r-c.hist+1)*c.ch]
}

// convolve writes the causal conv of x over [state; x] with wt into y and returns those
// rows (convRows), valid until release: the head is pooled scratch (a decode step's is 128
// KiB: allocated per call, it cost more than the convolution, in the collector's work and
// its preemptions).
func convolve(env *Env, x, state, wt, out *Tensor) (rows convRows, release func(), err error) {
	T, Ch := x.Shape[0], x.Shape[1]
	K := wt.Shape[1]
	// A bf16 weight is read as it is: decoding its Ch·K taps into a new float32 copy
	// every call cost more than the decode step's convolution itself (cpu/README.md).
	var w []float32
	var w16 []uint16
	if wt.DType == graph.BF16 && len(wt.Data) >= 2*Ch*K {
		w16 = u16(wt.Data)[:Ch*K]
	} else {
		if w, err = floats(wt); err != nil {
			return convRows{}, nil, fmt.Errorf("conv1d weight: %w", err)
		}
	}
	hist := K - 1
	xs := x.F32()
	if T == 1 && state.DType == graph.F32 {
		rows, release = convRows{state: state.F32()[:hist*Ch], x: xs, hist: hist, ch: Ch}, func() {}
	} else {
		head := min(T, hist)
		var scratch *Tensor
		scratch, release = scratchF32(hist+head, Ch)
		rows = convRows{head: scratch.F32(), x: xs, hist: hist, ch: Ch}
		srows := stateRows{t: state, cols: Ch}
		for r := 0; r < hist; r++ {
			srows.read(r, rows.head[r*Ch:(r+1)*Ch])
		}
		copy(rows.head[hist*Ch:], xs[:head*Ch])
	}
	y := out.F32()
	fast := conv4Rows != nil && !env.referenceKernels() && T >= conv4RowsMinTokens
	fastStep := conv4StepFast != nil && !env.referenceKernels() && T == 1
	parallelRange(env, Ch, func(lo, hi int) {
		if K == 4 && w16 != nil {
			if fast {
				lo = conv4Tokens(y, rows, w16, T, lo, hi)
			}
			if fastStep {
				lo += conv4StepFast(y[lo:hi], w16[lo*4:hi*4], rows.row(0)[lo:hi], rows.row(1)[lo:hi], rows.row(2)[lo:hi], rows.row(3)[lo:hi])
			}
			for t := 0; t < T; t++ {
				conv4Step(y[t*Ch+lo:t*Ch+hi], w16[lo*4:hi*4], rows.row(t)[lo:hi], rows.row(t + 1)[lo:hi], rows.row(t + 2)[lo:hi], rows.row(t + 3)[lo:hi])
			}
			return
		}
		for t := 0; t < T; t++ {
			yr := y[t*Ch : (t+1)*Ch]
			for c := lo; c < hi; c++ {
				var s float32
				for j := 0; j < K; j++ {
					xj := rows.row(t + j)[c]
					if w16 != nil {
						s += BF16ToF32(w16[c*K+j]) * xj
					} else {
						s += w[c*K+j] * xj
					}
				}
				yr[c] = s
			}
		}
	})
	return rows, release, nil
}

// conv4Rows, where the machine has it, is conv4Step for T tokens in assembly
// (conv_amd64.s), over n channels (a multiple of 8) of rows stride floats apart: token t's
// taps are rows t..t+3 from x, its result row t of y, the taps' weights in blocks of eight
// channels (conv4Weights). The same sums in the same order: the same bits.
var conv4Rows func(y, x []float32, stride int, w []float32, n, T int)

// conv4RowsMinTokens is the fewest tokens conv4Rows takes: it needs the weights laid out
// per block first, which a decode step's one token does not repay.
const conv4RowsMinTokens = 4

// conv4Tokens runs channels [lo, lo+n) of every token in conv4Rows, n the multiple of 8
// that fits in [lo, hi), and returns lo+n, where conv4Step takes the rest.
func conv4Tokens(y []float32, rows convRows, w16 []uint16, T, lo, hi int) int {
	n := (hi - lo) &^ 7
	if n == 0 {
		return lo
	}
	wt, done := scratchF32(4 * n)
	defer done()
	w := wt.F32()
	conv4Weights(w, w16[lo*4:(lo+n)*4])
	Ch := rows.ch
	// Tokens whose taps reach into the head (the state's rows), then those whose taps are
	// all x's rows, read in place: token t's first tap is x's row t-hist.
	head := min(T, rows.hist)
	conv4Rows(y[lo:], rows.head[lo:], Ch, w, n, head)
	if T > head {
		conv4Rows(y[head*Ch+lo:], rows.x[lo:], Ch, w, n, T-head)
	}
	return lo + n
}

// conv4Weights lays bf16 taps w16 (channel-major, four a channel) out as conv4Rows reads
// them: per block of eight channels, tap 0 of the eight, then tap 1, 2 and 3, as float32.
func conv4Weights(w []float32, w16 []uint16) {
	for c := 0; c < len(w16)/4; c++ {
		block, lane := c/8*32, c%8
		for j := 0; j < 4; j++ {
			w[block+8*j+lane] = BF16ToF32(w16[4*c+j])
		}
	}
}

// conv4StepFast, where the machine has it, is conv4Step in assembly over the first
// channels of y, a multiple of 16, reading the bf16 taps as stored (conv_amd64.s), and
// returns how many it did: the same sums in the same order, the same bits. A decode
// step's one token takes it; a run of tokens takes conv4Rows.
var conv4StepFast func(y []float32, w []uint16, x0, x1, x2, x3 []float32) int

// conv4Step is convolve's loop for one token and four bf16 taps (the Gated DeltaNet's
// conv, decode and prefill alike) over channels y[c] = Σ_j w[4c+j]·xj[c], in the general
// loop's order of operations (the same bits), with the rows resliced so that the loop
// keeps no bounds checks: 3-4x the general loop (BenchmarkConv1DDecode; prefill:
// BenchmarkConv1DPrefill).
func conv4Step(y []float32, w []uint16, x0, x1, x2, x3 []float32) {
	x0, x1, x2, x3 = x0[:len(y)], x1[:len(y)], x2[:len(y)], x3[:len(y)]
	w = w[:4*len(y)]
	for c := range y {
		taps := w[4*c : 4*c+4 : 4*c+4]
		var s float32
		s += BF16ToF32(taps[0]) * x0[c]
		s += BF16ToF32(taps[1]) * x1[c]
		s += BF16ToF32(taps[2]) * x2[c]
		s += BF16ToF32(taps[3]) * x3[c]
		y[c] = s
	}
}

// conv_state_shift is the conv state's update on its own: the state after a step is the
// last K-1 rows of [state; x]. A fused decode step (gated_delta_step) reads the old state
// in many GPU groups at once, so none of them may overwrite it; this op writes it after
// them, off the step's critical path.
func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "conv_state_shift",
			Doc:  "state' = the last K-1 rows of concat(state[K-1,Ch], x f32[T,Ch]): conv1d's state update without its output",
			Args: 2, Flags: graph.StateUpdate, Infer: inferConvStateShift},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 0) },
		Ref:  refConvStateShift,
	})
}

func inferConvStateShift(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "x", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	state, err := wantRank(v, 1, "state", 2, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("channels (x vs state)", x.Shape[1], state.Shape[1]); err != nil {
		return graph.Type{}, err
	}
	if _, err := constDim("state rows", state.Shape[0]); err != nil {
		return graph.Type{}, err
	}
	return state, nil
}

func refConvStateShift(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, state := in[0], in[1]
	T, Ch, hist := x.Shape[0], x.Shape[1], state.Shape[0]
	// [state; x] as float32 rows, read in full before the (possibly aliased) write.
	X := make([]float32, (hist+T)*Ch)
	srows := stateRows{t: state, cols: Ch}
	for r := 0; r < hist; r++ {
		srows.read(r, X[r*Ch:(r+1)*Ch])
	}
	copy(X[hist*Ch:], x.F32())
	next := stateRows{t: out[0], cols: Ch}
	for r := 0; r < hist; r++ {
		next.write(r, X[(T+r)*Ch:(T+r+1)*Ch])
	}
	return nil
}
