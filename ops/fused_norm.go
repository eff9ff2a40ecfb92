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
	for i, av := range a {
		s[i] = av + b[i]
	}
	rmsNormRows(env, s, y, w, eps)
	return nil
}
