package ops

import "pistil/graph"

// Greedy token choice: the index of each row's largest logit (the first on ties).

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "argmax", Doc: "index of the largest element of each row: f32[T,V] -> i32[T]", Args: 1,
			Infer: inferArgmax},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			c := plainCost(v, b, 0)
			c.Flops = elemsOf(arg(v, 0), b)
			return c
		},
		Ref: refArgmax,
	})
}

func inferArgmax(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "x", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	return graph.TensorType(graph.I32, x.Shape[0]), nil
}

func refArgmax(env *Env, v *graph.Value, in, out []*Tensor) error {
	V := in[0].Shape[1]
	x, ids := in[0].F32(), out[0].I32()
	for t := range ids {
		row := x[t*V : (t+1)*V]
		best := 0
		for i, xv := range row {
			if xv > row[best] {
				best = i
			}
		}
		ids[t] = int32(best)
	}
	return nil
}
