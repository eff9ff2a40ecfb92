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
