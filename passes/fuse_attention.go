package passes

import (
	"pistil/graph"
)

// Attention fusions: the q/k norm with its RoPE, the query slice read by that norm in
// place, the key's norm and RoPE written straight into the cache, and the sigmoid output
// gate folded into o_proj. Each is its own pass with its own switch.

// fuseQKNormRoPE folds rms_norm→rope (attention's per-head q and k norms) into
// rms_norm_rope: one pass over each head instead of two, one stage instead of two.
func fuseQKNormRoPE(u *Unit) error {
	r := newRewriter(u, "fuse-qk-norm-rope")
	for _, v := range u.Graph.Values {
		if !is(v, "rope") || !r.free(v) {
			continue
		}
		n := v.Args[0]
		if !is(n, "rms_norm") || !r.only(n) {
			continue
		}
		attrs := graph.Attrs{"eps": n.Attrs["eps"], "dims": v.Attrs["dims"], "theta": v.Attrs["theta"]}
		if err := r.fuseInto(v, "rms_norm→rope", "rms_norm_rope", v.Name, attrs, n.Args, n); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseAttnGate folds matmul(mul(a, sigmoid(g)), W) — attention's output gate applied
// before o_proj — into sigmoid_gate_matmul: the gate is applied in the projection's
// prologue, as the input row is loaded.
func fuseAttnGate(u *Unit) error {
	r := newRewriter(u, "fuse-attn-gate")
	for _, v := range u.Graph.Values {
		if !is(v, plainMatmuls...) || !r.free(v) {
			continue
		}
		gated := v.Args[0]
		if !is(gated, "mul") || !r.only(gated) {
			continue
		}
		a, sig := gated.Args[0], gated.Args[1]
		if !is(sig, "sigmoid") || !r.only(sig) || !a.Type.Equal(sig.Type) {
			continue
		}
		if err := r.fuseInto(v, "matmul(mul(a, sigmoid))", "sigmoid_gate_matmul", v.Name, nil,
			[]*graph.Value{a, sig.Args[0], v.Args[1]}, gated, sig); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseSliceRoPE folds slice→rms_norm_rope (the query heads cut from q_proj's [query |
// gate] rows) into slice_rms_norm_rope: the norm reads its heads where q_proj wrote them,
// so the copy is no dispatch and no stage of its own.
func fuseSliceRoPE(u *Unit) error {
	r := newRewriter(u, "fuse-slice-rope")
	for _, v := range u.Graph.Values {
		if !is(v, "rms_norm_rope") || !r.free(v) {
			continue
		}
		sl := v.Args[0]
		if !is(sl, "slice") || !r.only(sl) {
			continue
		}
		attrs := graph.Attrs{"axis": sl.Attrs["axis"], "start": sl.Attrs["start"], "end": sl.Attrs["end"],
			"eps": v.Attrs["eps"], "dims": v.Attrs["dims"], "theta": v.Attrs["theta"]}
		if err := r.fuseInto(v, "slice→rms_norm_rope", "slice_rms_norm_rope", v.Name, attrs,
			[]*graph.Value{sl.Args[0], v.Args[1]}, sl); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseRoPEAppend folds rms_norm_rope→kv_append (the key heads' norm and RoPE, then their
// cache rows) into rms_norm_rope_append: the rotated keys go straight into the cache, so
// the append is no dispatch and no stage of its own.
func fuseRoPEAppend(u *Unit) error {
	r := newRewriter(u, "fuse-rope-append")
	for _, v := range u.Graph.Values {
		if !is(v, "kv_append") || !r.free(v) {
			continue
		}
		k := v.Args[1]
		if !is(k, "rms_norm_rope") || !r.only(k) {
			continue
		}
		attrs := graph.Attrs{"eps": k.Attrs["eps"], "dims": k.Attrs["dims"], "theta": k.Attrs["theta"]}
		if err := r.fuseInto(v, "rms_norm_rope→kv_append", "rms_norm_rope_append", v.Name, attrs,
			[]*graph.Value{v.Args[0], k.Args[0], k.Args[1]}, k); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}
