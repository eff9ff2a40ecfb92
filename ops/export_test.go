package ops

import (
	"fmt"

	"pistil/graph"
)

// RunObserved is Run that hands every computed value (its op's inputs and outputs) to
// observe, for tests that look inside a model's run (the per-op int8 comparison).
func RunObserved(g *graph.Graph, env *Env, source func(v *graph.Value) (*Tensor, error),
	observe func(v *graph.Value, in, out []*Tensor)) (map[string]*Tensor, error) {
	r := &interp{env: env, vals: make([][]*Tensor, len(g.Values)), uses: g.Uses()}
	for i := range r.uses {
		r.uses[i] += len(g.Values) // keep every value: observe may look at any
	}
	for _, v := range g.Values {
		if err := r.step(v, source); err != nil {
			return nil, fmt.Errorf("run %s: %w", describe(v), err)
		}
		info, _ := Default.Info(v.Op)
		if info.Has(graph.Source) || info.Has(graph.View) {
			continue
		}
		in := make([]*Tensor, len(v.Args))
		for i, a := range v.Args {
			if ts := r.vals[a.ID]; len(ts) == 1 {
				in[i] = ts[0]
			}
		}
		observe(v, in, r.vals[v.ID])
	}
	out := map[string]*Tensor{}
	for _, o := range g.Outputs {
		out[o.Name] = r.vals[o.Value.ID][0]
	}
	return out, nil
}
