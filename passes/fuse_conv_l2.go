package passes

import "pistil/graph"

// fuseConvL2 folds the q and k slice_l2_norms that feed a gated_delta into the
// conv1d_silu they read: conv1d_silu_l2 writes the conv output (still read in place for
// the v heads) and the normed q and k heads, one dispatch and one stage fewer each for
// the norms. On a GPU the norms are the conv kernel's epilogue where a group holds whole
// heads (decode); expand-for-backend gives the shapes it does not cover (prefill) their
// staged ops back, as it does for any fused op.
//
// It runs after fuse-gdn-prologue, which folds the same conv1d_silu and norms into the
// whole recurrent step: with both on, the prologue takes them and this pass finds none.
func fuseConvL2(u *Unit) error {
	r := newRewriter(u, "fuse-conv-l2")
	for _, delta := range u.Graph.Values {
		if !is(delta, "gated_delta") || len(delta.Args) != 6 {
			continue
		}
		q, k := delta.Args[0], delta.Args[1]
		if !is(q, "slice_l2_norm") || !is(k, "slice_l2_norm") || q == k || !r.free(q) || !r.free(k) {
			continue
		}
		y := q.Args[0]
		if k.Args[0] != y || !is(y, graph.OpSelect) || y.Attrs.Int("index") != 0 || !r.free(y) || len(y.Type.Shape) != 2 {
			continue
		}
		// The parts are channel ranges of the conv's [T, Ch] output, heads of one shape.
		if q.Attrs.Int("axis") != 1 || k.Attrs.Int("axis") != 1 || !q.Type.Equal(k.Type) {
			continue
		}
		conv := y.Args[0]
		if !is(conv, "conv1d_silu") || !r.free(conv) {
			continue
		}
		var states []*graph.Value
		ok := true
		for _, w := range r.users[conv.ID] {
			switch {
			case w == y:
			case is(w, graph.OpSelect) && w.Attrs.Int("index") == 1 && r.free(w):
				states = append(states, w)
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		attrs := graph.Attrs{
			"q_start": q.Attrs["start"], "q_end": q.Attrs["end"], "k_start": k.Attrs["start"], "k_end": k.Attrs["end"],
			"shape": q.Attrs["shape"], "q_eps": q.Attrs["eps"], "q_scale": q.Attrs["scale"], "k_eps": k.Attrs["eps"], "k_scale": k.Attrs["scale"],
		}
		fused, err := r.fuse("conv1d_silu→slice_l2_norm", "conv1d_silu_l2", conv.Name, attrs, conv.Args, conv)
		if err != nil {
			return err
		}
		for i, old := range []*graph.Value{y, q, k} {
			if err := r.replace(old, r.elem(fused, i, old.Name)); err != nil {
				return err
			}
		}
		for _, s := range states {
			if err := r.replace(s, r.elem(fused, 3, s.Name)); err != nil {
				return err
			}
		}
	}
	r.finish()
	return nil
}
