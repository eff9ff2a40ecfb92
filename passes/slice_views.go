package passes

import (
	"pistil/graph"
	"pistil/ops"
)

// sliceViews replaces every slice whose range is one contiguous run of its argument
// (every dimension before its axis is 1: a decode step's slices of one token's row, such
// as the Gated DeltaNet's value heads out of the short convolution's output) with a
// slice_view, which plan-memory places on the argument's bytes at the range's offset:
// the copy's dispatch (on a GPU a launch; 30 a decode step of the 35B-A3B, each beside
// the q and k norms, so no stage goes) disappears and its readers read the argument in
// place. Left as copies: slices
// of several rows (prefill), of a source (a weight or state, whose bytes a later in-place
// update may change), that are graph outputs (an output owns its storage), and those
// whose offset would break the Align every placement keeps.
func sliceViews(u *Unit) error {
	r := newRewriter(u, "slice-views")
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	outputs := map[*graph.Value]bool{}
	for _, o := range u.Graph.Outputs {
		outputs[o.Value] = true
	}
	for _, v := range u.Graph.Values {
		if !is(v, "slice") || !r.free(v) || outputs[v] {
			continue
		}
		a, axis := v.Args[0], int(v.Attrs.Int("axis"))
		if !ops.SliceIsContiguous(a.Type, axis) || ops.SliceViewOffset(a.Type, axis, int(v.Attrs.Int("start")), bind)%Align != 0 || viewsASource(u, a) {
			continue
		}
		if err := r.fuseInto(v, "contiguous slice→view", "slice_view", v.Name, v.Attrs, v.Args); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// viewsASource reports whether v is a source (input, weight, state) or a view of one.
func viewsASource(u *Unit, v *graph.Value) bool {
	for {
		def, ok := u.Ops.Lookup(v.Op)
		if !ok {
			return false
		}
		if def.Has(graph.Source) {
			return true
		}
		if !def.Has(graph.View) || len(v.Args) == 0 {
			return false
		}
		v = v.Args[0]
	}
}
