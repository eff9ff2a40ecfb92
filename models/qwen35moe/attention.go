package qwen35moe

import "pistil/graph"

// attention declares a gated full-attention mixer (model-spec.md §2.3): q_proj emits, per
// head, [query HD | gate HD]; q and k get a per-head RMSNorm and partial RoPE; k and v are
// appended to the cache; the output is gated by sigmoid(gate) before o_proj.
func (l *layer) attention(h *graph.Value) *graph.Value {
	m, b, cfg, p := l.m, l.m.b, l.m.cfg, l.prefix+"self_attn."
	H, NH, KVH, HD := cfg.HiddenSize, cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim

	qg := m.reshape(m.linear(h, p+"q_proj", 2*NH*HD, H), p+"qg", tDims(NH, 2*HD)...)
	q := m.slice(qg, p+"q", 2, 0, HD)
	gate := m.reshape(m.slice(qg, p+"gate", 2, HD, 2*HD), p+"gate_flat", tDims(NH*HD)...)
	k := m.reshape(m.linear(h, p+"k_proj", KVH*HD, H), p+"k", tDims(KVH, HD)...)
	v := m.reshape(m.linear(h, p+"v_proj", KVH*HD, H), p+"v", tDims(KVH, HD)...)

	q = m.rmsNorm(q, p+"q_norm", HD)
	k = m.rmsNorm(k, p+"k_norm", HD)
	rope := graph.Attrs{"dims": int64(cfg.RotaryDim()), "theta": cfg.RopeTheta}
	q = b.Named("rope", p+"q_rope", rope, q)
	k = b.Named("rope", p+"k_rope", rope, k)

	cacheType := graph.TensorType(m.opts.KVDType, graph.N, graph.D(KVH), graph.D(HD))
	kc := b.Named("kv_append", p+"k_append", nil, l.newState("k_cache", cacheType), k)
	vc := b.Named("kv_append", p+"v_append", nil, l.newState("v_cache", cacheType), v)
	l.final("k_cache", kc)
	l.final("v_cache", vc)

	o := b.Named("attention", p+"attention", graph.Attrs{"scale": invSqrt(HD)}, q, kc, vc)
	o = m.reshape(o, p+"o_flat", tDims(NH*HD)...)
	o = b.Named("mul", p+"gated", nil, o, b.Named("sigmoid", p+"gate_sigmoid", nil, gate))
	return m.linear(o, p+"o_proj", H, NH*HD)
}
