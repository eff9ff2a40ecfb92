package qwen35moe

import "pistil/graph"

// deltaNet declares a Gated DeltaNet mixer (model-spec.md §2.5): projections, the causal
// short conv over the raw q|k|v channels with carried state, SiLU, L2-normalised q (scaled
// by 1/√Dk) and k, the per-head decay g = -exp(A_log)·softplus(a + dt_bias) and
// beta = sigmoid(b), the gated delta rule over the float32 recurrent state, and a gated
// RMSNorm (gate silu(z)) per value head before out_proj.
func (l *layer) deltaNet(h *graph.Value) *graph.Value {
	m, b, cfg, p := l.m, l.m.b, l.m.cfg, l.prefix+"linear_attn."
	H, Hk, Hv := cfg.HiddenSize, cfg.LinearNumKeyHeads, cfg.LinearNumValueHeads
	Dk, Dv, K := cfg.LinearKeyHeadDim, cfg.LinearValueHeadDim, cfg.LinearConvKernel
	KD, VD, CD := cfg.LinearKeyDim(), cfg.LinearValueDim(), cfg.ConvDim()

	mixed := m.linear(h, p+"in_proj_qkv", CD, H)
	z := m.reshape(m.linear(h, p+"in_proj_z", VD, H), p+"z", tDims(Hv, Dv)...)
	beta := b.Named("sigmoid", p+"beta", nil, m.linear(h, p+"in_proj_b", Hv, H))
	a := m.linear(h, p+"in_proj_a", Hv, H)

	convState := l.newState("conv_state", graph.TensorType(m.opts.ConvStateDType, graph.D(K-1), graph.D(CD)))
	conv := b.Named("conv1d", p+"conv", nil, mixed, convState, m.weight(p+"conv1d", CD, K))
	l.final("conv_state", b.Named("select", p+"conv_state", graph.Attrs{"index": int64(1)}, conv))
	y := b.Named("silu", p+"conv_silu", nil, b.Named("select", p+"conv_out", graph.Attrs{"index": int64(0)}, conv))

	q := m.reshape(m.slice(y, p+"q", 1, 0, KD), p+"q_heads", tDims(Hk, Dk)...)
	k := m.reshape(m.slice(y, p+"k", 1, KD, 2*KD), p+"k_heads", tDims(Hk, Dk)...)
	v := m.reshape(m.slice(y, p+"v", 1, 2*KD, 2*KD+VD), p+"v_heads", tDims(Hv, Dv)...)
	q = b.Named("l2_norm", p+"q_norm", graph.Attrs{"eps": 1e-6, "scale": invSqrt(Dk)}, q)
	k = b.Named("l2_norm", p+"k_norm", graph.Attrs{"eps": 1e-6, "scale": 1.0}, k)

	decayRate := b.Named("neg", p+"neg_A", nil, b.Named("exp", p+"exp_A", nil, m.weight(p+"A_log", Hv)))
	dt := b.Named("softplus", p+"dt", nil, b.Named("add", p+"a_dt", nil, a, m.weight(p+"dt_bias", Hv)))
	g := b.Named("mul", p+"g", nil, dt, decayRate)

	recurrent := l.newState("recurrent_state", graph.TensorType(graph.F32, graph.D(Hv), graph.D(Dk), graph.D(Dv)))
	rule := graph.Attrs{"form": m.opts.DeltaRule, "chunk": int64(deltaChunk)}
	delta := b.Named("gated_delta", p+"delta", rule, q, k, v, g, beta, recurrent)
	l.final("recurrent_state", b.Named("select", p+"recurrent_state", graph.Attrs{"index": int64(1)}, delta))
	o := b.Named("select", p+"delta_out", graph.Attrs{"index": int64(0)}, delta)

	o = b.Named("gated_rms_norm", p+"norm", graph.Attrs{"eps": cfg.RMSNormEps}, o, z, m.weight(p+"norm", Dv))
	return m.linear(m.reshape(o, p+"o_flat", tDims(VD)...), p+"out_proj", H, VD)
}
