package ops

import (
	"fmt"

	"pistil/graph"
)

// Fused matmuls: several projections of one activation in one dispatch (horizontal
// fusion), the SwiGLU MLP's gate and up projections with the activation in their
// epilogue, and a projection whose epilogue scales by a sigmoid gate and adds a residual.
// Weights may be any weight dtype (f32/bf16/f16 or q4/q8 dequantized on the fly), so the
// fusions apply with or without fuse-dequant.

func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "matmuls",
			Doc:  "(x·W1ᵀ, ..., x·Wnᵀ) for n ≥ 2 weights that project the same x, in one dispatch",
			Args: -1},
		Ref: refMatmuls,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			out := make([]*graph.Value, 0, len(v.Args)-1)
			for _, w := range v.Args[1:] {
				out = append(out, b.Op(matmulOpFor(w.Type), nil, v.Args[0], w))
			}
			return out
		},
	}, func(v *graph.Value) error {
		if len(v.Args) < 3 {
			return fmt.Errorf("matmuls has %d args, want x and at least two weights", len(v.Args))
		}
		return nil
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "matmul_swiglu",
			Doc:  "silu(x·Wgᵀ) * (x·Wuᵀ): a SwiGLU MLP's gate and up projections and its activation",
			Args: 3},
		Ref: refMatmulSwiGLU,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, wg, wu := v.Args[0], v.Args[1], v.Args[2]
			return b.Named("swiglu", v.Name, nil, b.Op(matmulOpFor(wg.Type), nil, x, wg), b.Op(matmulOpFor(wu.Type), nil, x, wu))
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "matmul_gated_add",
			Doc:  "other + (x·Wᵀ) * sigmoid(gate): a projection scaled by a per-row sigmoid gate f32[...,1], added to other",
			Args: 4},
		Ref: refMatmulGatedAdd,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, w, gate, other := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
			y := b.Op(matmulOpFor(w.Type), nil, x, w)
			return b.Named("add", v.Name, nil, other, b.Op("mul", nil, y, b.Op("sigmoid", nil, gate)))
		},
	}, func(v *graph.Value) error {
		// One gate value per row: the kernel scales whole rows.
		if len(v.Args) == 4 {
			x, gate := v.Args[0].Type, v.Args[2].Type
			if len(gate.Shape) != len(x.Shape) || last(gate.Shape) != graph.D(1) {
				return fmt.Errorf("matmul_gated_add: gate %s is not one value per row of x %s", gate, x)
			}
		}
		return nil
	})
}

// refMatmuls runs every projection over the shared x; each is the matmul kernel itself.
func refMatmuls(env *Env, v *graph.Value, in, out []*Tensor) error {
	x := in[0].F32()
	if ok, err := mulRowsOneRegion(env, x, in[1:], out); ok || err != nil {
		return err
	}
	for i, wt := range in[1:] {
		w, err := newWeightRows(wt)
		if err != nil {
			return fmt.Errorf("matmuls weight %d: %w", i, err)
		}
		if len(x)%w.cols != 0 {
			return fmt.Errorf("matmuls: x has %d elements, not a multiple of K = %d", len(x), w.cols)
		}
		mulRows(env, x, len(x)/w.cols, w, 0, w.rows(), out[i].F32(), w.rows())
	}
	return nil
}

func refMatmulSwiGLU(env *Env, v *graph.Value, in, out []*Tensor) error {
	x := in[0].F32()
	y := out[0].F32()
	up, release := scratchF32(len(y))
	defer release()
	if ok, err := mulRowsOneRegion(env, x, in[1:3], []*Tensor{out[0], up}); err != nil {
		return err
	} else if ok {
		siluGate(env, y, y, up.F32())
		return nil
	}
	for i, dst := range [][]float32{y, up.F32()} {
		w, err := newWeightRows(in[1+i])
		if err != nil {
			return fmt.Errorf("matmul_swiglu weight %d: %w", i, err)
		}
		if len(x)%w.cols != 0 {
			return fmt.Errorf("matmul_swiglu: x has %d elements, not a multiple of K = %d", len(x), w.cols)
		}
		mulRows(env, x, len(x)/w.cols, w, 0, w.rows(), dst, w.rows())
	}
	siluGate(env, y, y, up.F32())
	return nil
}

func refMatmulGatedAdd(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, err := newWeightRows(in[1])
	if err != nil {
		return fmt.Errorf("matmul_gated_add weight: %w", err)
	}
	x, y := in[0].F32(), out[0].F32()
	gate, err := floats(in[2])
	if err != nil {
		return fmt.Errorf("matmul_gated_add gate: %w", err)
	}
	other, err := floats(in[3])
	if err != nil {
		return fmt.Errorf("matmul_gated_add other: %w", err)
	}
	K, M := w.cols, w.rows()
	P := len(x) / K
	if len(x)%K != 0 || len(gate) != P || len(other) != len(y) {
		return fmt.Errorf("matmul_gated_add: x %v, gate %v, other %v do not fit %d rows of %d", in[0].Shape, in[2].Shape, in[3].Shape, P, M)
	}
	mulRows(env, x, P, w, 0, M, y, M)
	for p := 0; p < P; p++ {
		s := sigmoid(gate[p])
		row, o := y[p*M:(p+1)*M], other[p*M:(p+1)*M]
		for i, val := range row {
			// The explicit conversion rounds the product as the unfused mul does (no FMA).
			row[i] = o[i] + float32(val*s)
		}
	}
	return nil
}

// mulRowsOneRegion is a decode step's mulRows for several weights that project the same
// one row x (matmuls, matmul_swiglu) in one parallel region: the weights' rows laid end to
// end and split into contiguous chunks over the workers, so that a step waits for its
// workers once, not once per weight, and the small weights (the GDN's a and b
// projections, 32 rows each) are no region of their own. Every output row is the same
// kernel on the same bytes as mulRows', so the result is the same to the bit. It reports
// false, having done nothing, where it does not apply: more than one row, a weight not
// quantized or under the reference kernels, or SetDecodeRegions(false).
func mulRowsOneRegion(env *Env, x []float32, wts, out []*Tensor) (bool, error) {
	if !decodeRegions.Load() || env.workers() < 2 {
		return false, nil
	}
	ws := make([]weightRows, len(wts))
	starts := make([]int, len(wts)+1)
	for i, wt := range wts {
		w, err := newWeightRows(wt)
		if err != nil {
			return true, fmt.Errorf("weight %d: %w", i, err)
		}
		w = w.forEnv(env)
		if !w.t.DType.Quantized() || w.reference || len(x) != w.cols || len(out[i].F32()) < w.rows() {
			return false, nil
		}
		ws[i] = w
		starts[i+1] = starts[i] + w.rows()
	}
	// The row is prepared once per weight type and group (what its preparation depends
	// on): the GDN's four input projections share one.
	acts := make([]*quantActs, len(ws))
	for i, w := range ws {
		if j := sameActs(ws[:i], w); j >= 0 {
			acts[i] = acts[j]
			continue
		}
		acts[i] = prepareActs(env.serial(), w, x, 1)
	}
	parallelBalanced(env, starts[len(ws)], func(_, lo, hi int) {
		for i, w := range ws {
			a, b := max(lo, starts[i])-starts[i], min(hi, starts[i+1])-starts[i]
			if a < b {
				mulQuantRow(acts[i], w, 0, a, b, out[i].F32()[a:b])
			}
		}
	})
	for i, a := range acts {
		if sameActs(ws[:i], ws[i]) < 0 {
			a.release()
		}
	}
	return true, nil
}

// sameActs is the first of ws whose activations prepare as w's do (the same weight type
// and group, for rows of the same length), or -1.
func sameActs(ws []weightRows, w weightRows) int {
	for j, o := range ws {
		if o.t.DType == w.t.DType && o.t.Group == w.t.Group && o.cols == w.cols {
			return j
		}
	}
	return -1
}
