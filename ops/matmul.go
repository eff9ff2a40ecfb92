package ops

import (
	"fmt"

	"pistil/graph"
)

// Matmul family: y = x·Wᵀ against a weight stored [out, in], the quantized variants, the
// standalone dequantization the fusion pass folds away, and the embedding row lookup.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "embed", Doc: "rows ids of table [V,H] (any weight dtype) -> f32[T,H]", Args: 2,
			Infer: inferEmbed},
		Cost: costEmbed,
		Ref:  refEmbed,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "dequant", Doc: "q4/q8 weight -> f32 of the same logical shape (w = s*q + b per group)", Args: 1,
			Flags: graph.Fusable, Infer: inferDequant},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 2) },
		Ref:  refDequant,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "matmul", Doc: "x f32[...,K] · w[M,K]ᵀ (f32/bf16/f16) -> f32[...,M]", Args: 2,
			Infer: func(v *graph.Value) (graph.Type, error) { return inferMatmul(v, floatDTypes) }},
		Cost: costMatmul,
		Ref:  refMatmul,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "qmatmul", Doc: "x f32[...,K] · w[M,K]ᵀ with w q4/q8, dequantized on the fly = matmul(x, dequant(w))", Args: 2,
			Infer: func(v *graph.Value) (graph.Type, error) {
				return inferMatmul(v, []graph.DType{graph.Q4, graph.Q8})
			}},
		Cost: costMatmul,
		Ref:  refMatmul,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			return b.Named("matmul", v.Name, nil, v.Args[0], b.Op("dequant", nil, v.Args[1]))
		},
	})
}

func inferEmbed(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	table, err := wantRank(v, 0, "table", 2, weightDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	ids, err := wantRank(v, 1, "ids", 1, graph.I32)
	if err != nil {
		return graph.Type{}, err
	}
	return f32(ids.Shape[0], table.Shape[1]), nil
}

// costEmbed reads only the looked-up rows of the table.
func costEmbed(v *graph.Value, b graph.Bindings) Cost {
	table, ids := arg(v, 0), arg(v, 1)
	rows := elemsOf(ids, b)
	cols := int64(table.Shape[1].Eval(b))
	return Cost{BytesRead: ids.Bytes(b) + bytesOfElems(table, rows*cols), BytesWritten: v.Type.Bytes(b)}
}

func refEmbed(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, err := newWeightRows(in[0])
	if err != nil {
		return fmt.Errorf("embed table: %w", err)
	}
	y := out[0].F32()
	vocab := w.rows()
	for t, id := range in[1].I32() {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("embed: token id %d at position %d is outside the vocabulary [0, %d)", id, t, vocab)
		}
		w.decode(int(id), y[t*w.cols:(t+1)*w.cols])
	}
	return nil
}

func inferDequant(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	w, err := wantMinRank(v, 0, "w", 2, graph.Q4, graph.Q8)
	if err != nil {
		return graph.Type{}, err
	}
	return f32(w.Shape...), nil
}

func refDequant(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, err := newWeightRows(in[0])
	if err != nil {
		return fmt.Errorf("dequant: %w", err)
	}
	y := out[0].F32()
	parallelRange(env, w.rows(), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			w.decode(r, y[r*w.cols:(r+1)*w.cols])
		}
	})
	return nil
}

func inferMatmul(v *graph.Value, wTypes []graph.DType) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	x, err := wantMinRank(v, 0, "x", 1, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := wantRank(v, 1, "w", 2, wTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("inner dimension (x last vs w last)", last(x.Shape), w.Shape[1]); err != nil {
		return graph.Type{}, fmt.Errorf("%s x %s: %w", x, w, err)
	}
	return f32(withLast(x.Shape, w.Shape[0])...), nil
}

func costMatmul(v *graph.Value, b graph.Bindings) Cost {
	x, w := arg(v, 0), arg(v, 1)
	K := int64(last(x.Shape).Eval(b))
	M := int64(w.Shape[0].Eval(b))
	rows := elemsOf(x, b) / max(K, 1)
	return Cost{BytesRead: x.Bytes(b) + w.Bytes(b), BytesWritten: v.Type.Bytes(b), Flops: 2 * rows * M * K}
}

// refMatmul serves matmul and qmatmul: the weight reader picks the path by dtype.
func refMatmul(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, err := newWeightRows(in[1])
	if err != nil {
		return fmt.Errorf("%s weight: %w", v.Op, err)
	}
	x := in[0].F32()
	K, M := w.cols, w.rows()
	if len(x)%K != 0 {
		return fmt.Errorf("%s: x has %d elements, not a multiple of K = %d", v.Op, len(x), K)
	}
	mulRows(env, x, len(x)/K, w, 0, M, out[0].F32(), M)
	return nil
}
