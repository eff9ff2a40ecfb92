package passes

import (
	"pistil/gpu"
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

// gatedNormMatvec marks, for a GPU target, each gated_rms_norm_matmul with
// gpu.AttrGatedNormMatvec, so expand-for-backend keeps it whole where the decode kernel
// gated_rms_norm_matvec_q4 applies. Off, the GPU expands it into gated_rms_norm and the
// projection, two stages: on the H200 that measured faster (full model, decode 276.3
// against 265.2 tok/s at context 0, same call; cuda/README.md), the fused kernel's
// per-head reductions costing more than the stage they save.
func gatedNormMatvec(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil {
		return err
	}
	for _, v := range u.Graph.Values {
		if v.Op != "gated_rms_norm_matmul" {
			continue
		}
		markForKernel(u, v, gpu.AttrGatedNormMatvec, "gated-norm-matvec")
	}
	return nil
}

// markForKernel sets attribute attr on v (a copy of its attrs: values may share them),
// the mark by which a GPU target's lowering picks the kernel pass asked for, and counts it.
func markForKernel(u *Unit, v *graph.Value, attr, pass string) {
	a := v.Attrs.Clone()
	if a == nil {
		a = graph.Attrs{}
	}
	a[attr] = int64(1)
	v.Attrs = a
	u.count(pass+": "+v.Op, 1)
}

// fuseGDNPrologue folds a decode step's whole Gated DeltaNet prologue into the recurrent
// step: conv1d_silu, the q and k slice_l2_norms, the v slice and gdn_gates become
// gated_delta_step, one dispatch after the input projections instead of three stages
// (conv, then the slices, norms and gates, then gated_delta). The conv state's update
// becomes conv_state_shift, which only the next step needs: it runs after the step (the
// step's groups all read the old conv state, so none of them may write it) and off the
// critical path. Only one-token steps: the GPU kernel is a decode kernel, and prefill
// keeps the staged ops, whose conv and delta rule loop over the chunk's tokens.
func fuseGDNPrologue(u *Unit) error {
	r := newRewriter(u, "fuse-gdn-prologue")
	for _, delta := range u.Graph.Values {
		if !is(delta, "gated_delta") || len(delta.Args) != 6 || !r.free(delta) {
			continue
		}
		m, ok := matchGDNPrologue(r, delta)
		if !ok {
			continue
		}
		step, err := r.fuse("prologue→gated_delta", "gated_delta_step", delta.Name, m.attrs,
			[]*graph.Value{m.x, m.a, m.b, m.convState, m.convW, m.aLog, m.dtBias, delta.Args[5]}, m.absorbed...)
		if err != nil {
			return err
		}
		if err := r.replace(delta, step); err != nil {
			return err
		}
		shift, err := r.fuse("conv state", "conv_state_shift", m.newState.Name, nil, []*graph.Value{m.x, m.convState})
		if err != nil {
			return err
		}
		if err := r.replace(m.newState, shift); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// gdnPrologue is what fuseGDNPrologue found in front of one gated_delta.
type gdnPrologue struct {
	x, a, b, convState, convW, aLog, dtBias *graph.Value
	newState                                *graph.Value // the conv's updated state (select 1)
	attrs                                   graph.Attrs
	absorbed                                []*graph.Value
}

// matchGDNPrologue matches gated_delta(slice_l2_norm(y), slice_l2_norm(y),
// reshape(slice(y)), gdn_gates...) with y = select(conv1d_silu, 0), T = 1, every slice
// whole heads of y's channels, and every absorbed value used only inside the pattern.
func matchGDNPrologue(r *rewriter, delta *graph.Value) (gdnPrologue, bool) {
	var m gdnPrologue
	q, k, vh, g, beta := delta.Args[0], delta.Args[1], delta.Args[2], delta.Args[3], delta.Args[4]
	if T := vh.Type.Shape[0]; !T.IsConst() || T.Eval(graph.Bindings{}) != 1 {
		return m, false
	}
	if !is(q, "slice_l2_norm") || !is(k, "slice_l2_norm") || !r.only(q) || !r.only(k) || !is(vh, "reshape") || !r.only(vh) {
		return m, false
	}
	vs := vh.Args[0]
	if !is(vs, "slice") || !r.only(vs) {
		return m, false
	}
	if !is(g, graph.OpSelect) || !is(beta, graph.OpSelect) || !r.only(g) || !r.only(beta) || g.Args[0] != beta.Args[0] ||
		g.Attrs.Int("index") != 0 || beta.Attrs.Int("index") != 1 {
		return m, false
	}
	gates := g.Args[0]
	if !is(gates, "gdn_gates") || !r.free(gates) || r.uses[gates.ID] != 2 {
		return m, false
	}
	y := q.Args[0]
	if k.Args[0] != y || vs.Args[0] != y || !is(y, graph.OpSelect) || y.Attrs.Int("index") != 0 || !r.free(y) || r.uses[y.ID] != 3 {
		return m, false
	}
	conv := y.Args[0]
	if !is(conv, "conv1d_silu") || !r.free(conv) {
		return m, false
	}
	for _, w := range r.users[conv.ID] {
		switch {
		case w == y:
		case is(w, graph.OpSelect) && w.Attrs.Int("index") == 1 && m.newState == nil && r.free(w):
			m.newState = w
		default:
			return m, false
		}
	}
	if m.newState == nil {
		return m, false
	}
	// Whole heads of y's last axis: q and k [T, Hk, Dk], v [T, Hv, Dv].
	wholeHeads := func(sl *graph.Value, heads graph.Type) (int, bool) {
		s := heads.Shape
		if len(s) != 3 || !s[1].IsConst() || !s[2].IsConst() || sl.Attrs.Int("axis") != 1 {
			return 0, false
		}
		start, end := sl.Attrs.Int("start"), sl.Attrs.Int("end")
		return start, end-start == s[1].Eval(graph.Bindings{})*s[2].Eval(graph.Bindings{})
	}
	qStart, okQ := wholeHeads(q, q.Type)
	kStart, okK := wholeHeads(k, k.Type)
	vStart, okV := wholeHeads(vs, vh.Type)
	if !okQ || !okK || !okV {
		return m, false
	}
	m.x, m.convState, m.convW = conv.Args[0], conv.Args[1], conv.Args[2]
	m.a, m.b, m.aLog, m.dtBias = gates.Args[0], gates.Args[1], gates.Args[2], gates.Args[3]
	m.attrs = graph.Attrs{
		"key_heads": int64(q.Type.Shape[1].Eval(graph.Bindings{})),
		"q_start":   int64(qStart), "k_start": int64(kStart), "v_start": int64(vStart),
		"q_eps": q.Attrs["eps"], "q_scale": q.Attrs["scale"], "k_eps": k.Attrs["eps"], "k_scale": k.Attrs["scale"],
		"form": delta.Attrs["form"], "chunk": delta.Attrs["chunk"],
	}
	m.absorbed = []*graph.Value{conv, y, q, k, vs, vh, gates, g, beta}
	return m, true
}
