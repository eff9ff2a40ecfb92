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
	X, release, err := convolve(env, in[0], in[1], in[2], out[0])
	if err != nil {
		return err
	}
	defer release()
	T, Ch, hist := in[0].Shape[0], in[0].Shape[1], in[1].Shape[0]
	next := stateRows{t: out[1], cols: Ch}
	for r := 0; r < hist; r++ {
		next.write(r, X[(T+r)*Ch:(T+r+1)*Ch])
	}
	return nil
}

// convolve writes the causal conv of x over [state; x] with wt into y and returns that
// concatenation as float32 rows, read in full first: the state may alias its update. The
// rows are pooled scratch (a decode step's are 128 KiB: allocated per call, they cost more
// than the convolution, in the collector's work and its preemptions), valid until release.
func convolve(env *Env, x, state, wt, out *Tensor) (X []float32, release func(), err error) {
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
			return nil, nil, fmt.Errorf("conv1d weight: %w", err)
		}
	}
	hist := K - 1
	rows, release := scratchF32(hist+T, Ch)
	X = rows.F32()
	srows := stateRows{t: state, cols: Ch}
	for r := 0; r < hist; r++ {
		srows.read(r, X[r*Ch:(r+1)*Ch])
	}
	copy(X[hist*Ch:], x.F32())
	y := out.F32()
	parallelRange(env, Ch, func(lo, hi int) {
		if K == 4 && w16 != nil {
			for t := 0; t < T; t++ {
				xt := X[t*Ch:] // rows t..t+3 of [state; x]: the token's four taps
				conv4Step(y[t*Ch+lo:t*Ch+hi], w16[lo*4:hi*4], xt[lo:hi], xt[Ch+lo:Ch+hi], xt[2*Ch+lo:2*Ch+hi], xt[3*Ch+lo:3*Ch+hi])
			}
			return
		}
		for t := 0; t < T; t++ {
			yr := y[t*Ch : (t+1)*Ch]
			for c := lo; c < hi; c++ {
				var s float32
				if w16 != nil {
					for j := 0; j < K; j++ {
						s += BF16ToF32(w16[c*K+j]) * X[(t+j)*Ch+c]
					}
				} else {
					for j := 0; j < K; j++ {
						s += w[c*K+j] * X[(t+j)*Ch+c]
					}
				}
				yr[c] = s
			}
		}
	})
	return X, release, nil
}

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
