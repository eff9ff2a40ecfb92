package passes

import (
	"pistil/graph"
)

// Gated DeltaNet fusions: the gates, the short conv's activation, and the q/k split with
// its L2 norm. Each is its own pass with its own switch.

// fuseGDNGates folds the decay g = mul(softplus(add(a, dt_bias)), neg(exp(A_log))) and
// the write strength beta = sigmoid(b) that feed a gated_delta into one gdn_gates: six
// one-element-per-head dispatches become one (the weight-only exp and neg are computed in
// the kernel, 32 values).
func fuseGDNGates(u *Unit) error {
	r := newRewriter(u, "fuse-gdn-gates")
	for _, v := range u.Graph.Values {
		if v.Op != "gated_delta" || len(v.Args) != 6 {
			continue
		}
		g, beta := v.Args[3], v.Args[4]
		if !is(g, "mul") || !is(beta, "sigmoid") || !r.free(g) || !r.free(beta) {
			continue
		}
		sp, neg := g.Args[0], g.Args[1]
		if !is(sp, "softplus") || !is(neg, "neg") || !r.only(sp) || !r.only(neg) {
			continue
		}
		add, exp := sp.Args[0], neg.Args[0]
		if !is(add, "add") || !is(exp, "exp") || !r.only(add) || !r.only(exp) {
			continue
		}
		a, dtBias, aLog, b := add.Args[0], add.Args[1], exp.Args[0], beta.Args[0]
		gates, err := r.fuse("gates", "gdn_gates", sibling(g.Name, "gates"), nil,
			[]*graph.Value{a, b, aLog, dtBias}, sp, neg, add, exp)
		if err != nil {
			return err
		}
		if err := r.replace(g, r.elem(gates, 0, g.Name)); err != nil {
			return err
		}
		if err := r.replace(beta, r.elem(gates, 1, beta.Name)); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseConvSiLU folds the SiLU on a conv1d's output into conv1d_silu: the conv's f32
// output never goes to memory before its activation.
func fuseConvSiLU(u *Unit) error {
	r := newRewriter(u, "fuse-conv-silu")
	for _, v := range u.Graph.Values {
		if !is(v, "silu") || !r.free(v) {
			continue
		}
		y := v.Args[0]
		if !is(y, graph.OpSelect) || y.Attrs.Int("index") != 0 || !r.only(y) {
			continue
		}
		conv := y.Args[0]
		if !is(conv, "conv1d") || !r.free(conv) {
			continue
		}
		// The conv's other users are the selects of its updated state.
		var states []*graph.Value
		ok := true
		for _, w := range r.users[conv.ID] {
			switch {
			case w == y:
			case is(w, graph.OpSelect) && w.Attrs.Int("index") == 1:
				states = append(states, w)
			default:
				ok = false
			}
		}
		if !ok {
			continue
		}
		fused, err := r.fuse("conv1d→silu", "conv1d_silu", conv.Name, nil, conv.Args, y, conv)
		if err != nil {
			return err
		}
		if err := r.replace(v, r.elem(fused, 0, v.Name)); err != nil {
			return err
		}
		for _, s := range states {
			if err := r.replace(s, r.elem(fused, 1, s.Name)); err != nil {
				return err
			}
		}
	}
	r.finish()
	return nil
}

// fuseSliceL2 folds slice → (reshape) → l2_norm into slice_l2_norm: the q or k part of
// the conv output is read once, straight into its normed heads.
func fuseSliceL2(u *Unit) error {
	r := newRewriter(u, "fuse-slice-l2")
	for _, v := range u.Graph.Values {
		if !is(v, "l2_norm") || !r.free(v) {
			continue
		}
		heads, sl := v.Args[0], v.Args[0]
		var absorbed []*graph.Value
		if is(heads, "reshape") {
			if !r.only(heads) {
				continue
			}
			absorbed = append(absorbed, heads)
			sl = heads.Args[0]
		}
		if !is(sl, "slice") || !r.only(sl) {
			continue
		}
		absorbed = append(absorbed, sl)
		attrs := graph.Attrs{
			"axis": sl.Attrs["axis"], "start": sl.Attrs["start"], "end": sl.Attrs["end"],
			"shape": heads.Type.Shape.String(), "eps": v.Attrs["eps"], "scale": v.Attrs["scale"],
		}
		if err := r.fuseInto(v, "slice→l2_norm", "slice_l2_norm", v.Name, attrs, sl.Args, absorbed...); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseNormOutProj folds the Gated DeltaNet's gated RMSNorm (and the reshape of its heads
// to one row) into the output projection: gated_rms_norm_matmul recomputes the per-head
// norm in the projection's prologue, where the input row is read in full anyway, so the
// normed row never goes to memory and the norm stops being a stage of its own.
func fuseNormOutProj(u *Unit) error {
	r := newRewriter(u, "fuse-norm-out-proj")
	for _, v := range u.Graph.Values {
		if !is(v, plainMatmuls...) || !r.free(v) {
			continue
		}
		flat, norm := v.Args[0], v.Args[0]
		var absorbed []*graph.Value
		if is(flat, "reshape") {
			if !r.only(flat) {
				continue
			}
			absorbed = append(absorbed, flat)
			norm = flat.Args[0]
		}
		if !is(norm, "gated_rms_norm") || !r.only(norm) {
			continue
		}
		absorbed = append(absorbed, norm)
		args := append(append([]*graph.Value(nil), norm.Args...), v.Args[1])
		attrs := graph.Attrs{"eps": norm.Attrs["eps"], "shape": flat.Type.Shape.String()}
		if err := r.fuseInto(v, "gated_rms_norm→matmul", "gated_rms_norm_matmul", v.Name, attrs, args, absorbed...); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}
