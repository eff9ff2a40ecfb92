package ops

import (
	"fmt"

	"pistil/graph"
)

// add_rms_norm: the residual add and the RMSNorm that reads it, in one dispatch. The
// sum is still a result (the residual stream continues from it); the norm reads it from
// registers instead of from memory.

func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "add_rms_norm",
			Doc:  "(s, rms_norm(s)·w) with s = a + b {eps}: a residual add and the norm of its sum",
			Args: 3, Attrs: []string{"eps"}},
		Ref: refAddRMSNorm,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			s := b.Named("add", v.Name, nil, v.Args[0], v.Args[1])
			return []*graph.Value{s, b.Named("rms_norm", v.Name, graph.Attrs{"eps": v.Attrs.Float("eps")}, s, v.Args[2])}
		},
	}, func(v *graph.Value) error {
		if len(v.Args) == 3 && !v.Args[0].Type.Equal(v.Args[1].Type) {
			// The fused kernel adds element by element: no broadcast.
			return fmt.Errorf("add_rms_norm: a %s and b %s differ", v.Args[0].Type, v.Args[1].Type)
		}
		return nil
	})
}

// add_rms_norm_matmuls: add_rms_norm with the projections of its normed row (the
// norm-matvec passes, CUDA decode): the matrix-vector kernel sums the row's squares itself
// and scales its products by the norm, so no dispatch of its own stands between the
// residual add and the projections. The sum and the normed row are still results: the
// residual stream goes on from the sum, and the norm's other readers (the experts beside
// the router) read the row.
func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "add_rms_norm_matmuls",
			Doc:  "(s, y, y·W1ᵀ, ..., y·Wnᵀ) with (s, y) = add_rms_norm(a, b, w) {eps}: a residual add, its norm and the projections of the normed row (n ≥ 1)",
			Args: -1, Attrs: []string{"eps"}},
		Ref: refAddRMSNormMatmuls,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			n := selectAll(b, b.Named("add_rms_norm", v.Name, graph.Attrs{"eps": v.Attrs.Float("eps")}, v.Args[:3]...), 2)
			ws := v.Args[3:]
			if len(ws) == 1 {
				return append(n, b.Named(matmulOpFor(ws[0].Type), v.Name, nil, n[1], ws[0]))
			}
			return append(n, selectAll(b, b.Named("matmuls", v.Name, nil, append([]*graph.Value{n[1]}, ws...)...), len(ws))...)
		},
	}, func(v *graph.Value) error {
		if len(v.Args) < 4 {
			return fmt.Errorf("add_rms_norm_matmuls has %d args, want a, b, the norm's weight and at least one projection", len(v.Args))
		}
		return nil
	})
}

// refAddRMSNormMatmuls runs add_rms_norm, then the projections of its row as the ops it
// fuses run them (qmatmul or matmul for one weight, matmuls for several): the same bits
// as the expansion.
func refAddRMSNormMatmuls(env *Env, v *graph.Value, in, out []*Tensor) error {
	if err := refAddRMSNorm(env, v, in[:3], out[:2]); err != nil {
		return err
	}
	if ws := in[3:]; len(ws) > 1 {
		return refMatmuls(env, v, append([]*Tensor{out[1]}, ws...), out[2:])
	}
	return refMatmul(env, v, []*Tensor{out[1], in[3]}, out[2:])
}

func refAddRMSNorm(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, release, err := floatsScratch(in[2])
	if err != nil {
		return fmt.Errorf("add_rms_norm weight: %w", err)
	}
	defer release()
	eps := float32(v.Attrs.Float("eps"))
	a, err := floats(in[0])
	if err != nil {
		return fmt.Errorf("add_rms_norm a: %w", err)
	}
	b, err := floats(in[1])
	if err != nil {
		return fmt.Errorf("add_rms_norm b: %w", err)
	}
	s, y, D := out[0].F32(), out[1].F32(), len(w)
	if len(a) != len(b) || len(a)%D != 0 {
		return fmt.Errorf("add_rms_norm: a %v and b %v must match and be rows of %d", in[0].Shape, in[1].Shape, D)
	}
	addRow(env, s[:len(a)], a, b)
	rmsNormRows(env, s, y, w, eps)
	return nil
}
