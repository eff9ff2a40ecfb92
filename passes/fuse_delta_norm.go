package passes

import "pistil/graph"

// fuseDeltaNorm folds a decode step's gated RMSNorm of the Gated DeltaNet's output into
// the recurrent step: gated_delta → select(o) → gated_rms_norm becomes gated_delta_norm.
// On a GPU the norm is then no stage of its own: the kernel holds a value head's whole
// output in one group (gated_delta's layout, one SIMD group per 4 state columns), sums
// its squares there, and writes only the normed output, which the output projection
// reads as a plain matmul (fuse-norm-out-proj, later, finds no norm to fold).
//
// Only one-token steps: the kernel is a decode kernel, and prefill keeps the delta rule's
// token loop and the norm's rows as they are. Only where the norm is o's one reader (the
// fused op does not write o) and nothing in the step reads the updated state (so the
// gate z cannot depend on the step it is fused into).
//
// fuse-gdn-prologue, when on, runs first and makes gated_delta_step of every decode
// gated_delta; this pass matches gated_delta alone, so it leaves those steps as they are
// (counted in the dump), and the two never fold the same op.
func fuseDeltaNorm(u *Unit) error {
	r := newRewriter(u, "fuse-delta-norm")
	for _, delta := range u.Graph.Values {
		if is(delta, "gated_delta_step") {
			u.count("fuse-delta-norm: gated_delta_step left to fuse-gdn-prologue", 1)
			continue
		}
		if !is(delta, "gated_delta") || len(delta.Args) != 6 || !r.free(delta) {
			continue
		}
		if T := delta.Args[2].Type.Shape[0]; !T.IsConst() || T.Eval(graph.Bindings{}) != 1 {
			continue
		}
		o, state, ok := deltaResults(r, delta)
		if !ok || !r.only(o) || !r.free(state) || len(r.users[state.ID]) != 0 {
			continue
		}
		norm := r.users[o.ID][0]
		if !is(norm, "gated_rms_norm") || len(norm.Args) != 3 || norm.Args[0] != o || !r.free(norm) {
			continue
		}
		attrs := graph.Attrs{"form": delta.Attrs["form"], "chunk": delta.Attrs["chunk"], "eps": norm.Attrs["eps"]}
		args := append(append([]*graph.Value(nil), delta.Args...), norm.Args[1], norm.Args[2])
		fused, err := r.fuse("gated_delta→gated_rms_norm", "gated_delta_norm", delta.Name, attrs, args, delta, o)
		if err != nil {
			return err
		}
		if err := r.replace(norm, r.elem(fused, 0, norm.Name)); err != nil {
			return err
		}
		if err := r.replace(state, r.elem(fused, 1, state.Name)); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// deltaResults finds the selects of a gated_delta's output (0) and updated state (1),
// each taken once; ok is false if anything else reads the tuple.
func deltaResults(r *rewriter, delta *graph.Value) (o, state *graph.Value, ok bool) {
	for _, w := range r.users[delta.ID] {
		switch {
		case is(w, graph.OpSelect) && w.Attrs.Int("index") == 0 && o == nil:
			o = w
		case is(w, graph.OpSelect) && w.Attrs.Int("index") == 1 && state == nil:
			state = w
		default:
			return nil, nil, false
		}
	}
	return o, state, o != nil && state != nil
}
