package checkpoint

import (
	"fmt"

	"pistil/models/qwen35moe"
)

// Weight is one canonical weight and its logical (dequantized) shape.
type Weight struct {
	Name  string
	Shape []int
}

// Weights enumerates every weight the text model needs, in model order, with the shapes of
// the contract (contracts.md, "Canonical weight names"). It is the list Bind checks a
// checkpoint against and the source of CanonicalNames.
func Weights(cfg *qwen35moe.Config) []Weight {
	H, V := cfg.HiddenSize, cfg.VocabSize
	ws := []Weight{{"embed_tokens", []int{V, H}}}
	for i, kind := range cfg.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		add := func(name string, shape ...int) { ws = append(ws, Weight{p + name, shape}) }
		add("input_layernorm", H)
		add("post_attention_layernorm", H)
		if kind == qwen35moe.FullAttention {
			nh, kvh, hd := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
			add("self_attn.q_proj", 2*nh*hd, H)
			add("self_attn.k_proj", kvh*hd, H)
			add("self_attn.v_proj", kvh*hd, H)
			add("self_attn.o_proj", H, nh*hd)
			add("self_attn.q_norm", hd)
			add("self_attn.k_norm", hd)
		} else {
			conv, vd, hv := cfg.ConvDim(), cfg.LinearValueDim(), cfg.LinearNumValueHeads
			add("linear_attn.in_proj_qkv", conv, H)
			add("linear_attn.in_proj_z", vd, H)
			add("linear_attn.in_proj_b", hv, H)
			add("linear_attn.in_proj_a", hv, H)
			add("linear_attn.conv1d", conv, cfg.LinearConvKernel)
			add("linear_attn.dt_bias", hv)
			add("linear_attn.A_log", hv)
			add("linear_attn.norm", cfg.LinearValueHeadDim)
			add("linear_attn.out_proj", H, vd)
		}
		E, I, SI := cfg.NumExperts, cfg.MoEIntermediate, cfg.SharedIntermediate
		add("mlp.gate", E, H)
		add("mlp.experts.gate_proj", E, I, H)
		add("mlp.experts.up_proj", E, I, H)
		add("mlp.experts.down_proj", E, H, I)
		add("mlp.shared_expert.gate_proj", SI, H)
		add("mlp.shared_expert.up_proj", SI, H)
		add("mlp.shared_expert.down_proj", H, SI)
		add("mlp.shared_expert_gate", 1, H)
	}
	ws = append(ws, Weight{"norm", []int{H}}, Weight{"lm_head", []int{V, H}})
	return ws
}

// CanonicalNames lists every canonical weight name of the model described by cfg.
func CanonicalNames(cfg *qwen35moe.Config) []string {
	ws := Weights(cfg)
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	return names
}
