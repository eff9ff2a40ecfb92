package qwen35moe

import "pistil/graph"

// moe declares the sparse MoE block (model-spec.md §2.7): an fp32 softmax router with
// top-k renormalised weights over E SwiGLU experts, plus one shared SwiGLU expert scaled
// by sigmoid(shared_expert_gate · h).
func (l *layer) moe(h *graph.Value) *graph.Value {
	m, b, cfg, p := l.m, l.m.b, l.m.cfg, l.prefix+"mlp."
	H, E, I, SI := cfg.HiddenSize, cfg.NumExperts, cfg.MoEIntermediate, cfg.SharedIntermediate

	route := b.Named("router", p+"route", graph.Attrs{"k": int64(cfg.NumExpertsPerTok)}, m.linear(h, p+"gate", E, H))
	weights := b.Named("select", p+"route_weights", graph.Attrs{"index": int64(0)}, route)
	ids := b.Named("select", p+"route_ids", graph.Attrs{"index": int64(1)}, route)

	gate := l.expertMatmul(h, p+"experts.gate_proj", ids, E, I, H)
	up := l.expertMatmul(h, p+"experts.up_proj", ids, E, I, H)
	act := b.Named("swiglu", p+"experts.act", nil, gate, up)
	down := l.expertMatmul(act, p+"experts.down_proj", ids, E, H, I)
	routed := b.Named("moe_combine", p+"experts.combine", nil, down, weights)

	sp := p + "shared_expert."
	shared := b.Named("swiglu", sp+"act", nil, m.linear(h, sp+"gate_proj", SI, H), m.linear(h, sp+"up_proj", SI, H))
	shared = m.linear(shared, sp+"down_proj", H, SI)
	scale := b.Named("sigmoid", p+"shared_expert_scale", nil, m.linear(h, p+"shared_expert_gate", 1, H))
	shared = b.Named("mul", p+"shared_expert.scaled", nil, shared, scale)
	return b.Named("add", p+"out", nil, routed, shared)
}

// expertMatmul applies the routed experts of a stacked weight [E, out, in]; quantized
// stacks are declared as dequant + expert_matmul for the fusion pass to fold.
func (l *layer) expertMatmul(x *graph.Value, name string, ids *graph.Value, E, out, in int) *graph.Value {
	m := l.m
	w := m.weight(name, E, out, in)
	if w.Type.DType.Quantized() {
		w = m.b.Op("dequant", nil, w)
	}
	return m.b.Named("expert_matmul", name, nil, x, w, ids)
}
