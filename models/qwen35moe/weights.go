package qwen35moe

import (
	"fmt"
	"strings"

	"pistil/graph"
)

// Weight is one canonical weight the graph declares, with its logical (dequantized) shape.
type Weight struct {
	Name  string
	Shape []int
}

// Weights lists every canonical weight of the model in declaration order (contracts.md,
// "Canonical weight names").
func Weights(cfg *Config) []Weight {
	H, V := cfg.HiddenSize, cfg.VocabSize
	ws := []Weight{{"embed_tokens", []int{V, H}}}
	for i, kind := range cfg.Layers {
		p := fmt.Sprintf("layers.%d.", i)
		add := func(name string, shape ...int) { ws = append(ws, Weight{p + name, shape}) }
		add("input_layernorm", H)
		if kind == FullAttention {
			NH, KVH, HD := cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim
			add("self_attn.q_proj", 2*NH*HD, H)
			add("self_attn.k_proj", KVH*HD, H)
			add("self_attn.v_proj", KVH*HD, H)
			add("self_attn.q_norm", HD)
			add("self_attn.k_norm", HD)
			add("self_attn.o_proj", H, NH*HD)
		} else {
			CD, VD, Hv := cfg.ConvDim(), cfg.LinearValueDim(), cfg.LinearNumValueHeads
			add("linear_attn.in_proj_qkv", CD, H)
			add("linear_attn.in_proj_z", VD, H)
			add("linear_attn.in_proj_b", Hv, H)
			add("linear_attn.in_proj_a", Hv, H)
			add("linear_attn.conv1d", CD, cfg.LinearConvKernel)
			add("linear_attn.A_log", Hv)
			add("linear_attn.dt_bias", Hv)
			add("linear_attn.norm", cfg.LinearValueHeadDim)
			add("linear_attn.out_proj", H, VD)
		}
		add("post_attention_layernorm", H)
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
	return append(ws, Weight{"norm", []int{H}}, Weight{"lm_head", []int{V, H}})
}

// WeightNames lists every canonical weight name the model needs.
func WeightNames(cfg *Config) []string {
	ws := Weights(cfg)
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	return names
}

// MLXWeightType gives weights the types an mlx-community checkpoint of cfg has once the
// loader has presented it: matrices (and expert stacks, the embedding and lm_head) MLX
// affine-quantized per cfg.Quant with its per-module overrides, or 4-bit group 64 with
// 8-bit router and shared-expert gates when cfg has no quantization block; norms, conv1d
// and dt_bias BF16; A_log F32. It lets the graph be compiled without a checkpoint.
func MLXWeightType(cfg *Config) func(name string, logical graph.Shape) (graph.Type, error) {
	q := cfg.Quant
	if q == nil {
		q = &Quantization{GroupSize: 64, Bits: 4, Mode: "affine", Overrides: map[string]QuantParams{}}
	}
	return func(name string, logical graph.Shape) (graph.Type, error) {
		if len(logical) == 0 {
			return graph.Type{}, fmt.Errorf("weight %s: empty shape", name)
		}
		switch {
		case strings.HasSuffix(name, "A_log"):
			return graph.TensorType(graph.F32, logical...), nil
		case len(logical) == 1 || strings.HasSuffix(name, "conv1d"):
			return graph.TensorType(graph.BF16, logical...), nil
		}
		params := q.For(mlxModule(name))
		if cfg.Quant == nil && (strings.HasSuffix(name, "mlp.gate") || strings.HasSuffix(name, "shared_expert_gate")) {
			params.Bits = 8
		}
		if k := last(logical); !k.IsConst() || k.Const%params.GroupSize != 0 {
			return graph.TensorType(graph.BF16, logical...), nil // MLX leaves such matrices unquantized
		}
		dt := graph.Q4
		if params.Bits == 8 {
			dt = graph.Q8
		} else if params.Bits != 4 {
			return graph.Type{}, fmt.Errorf("weight %s: %d-bit quantization is not supported", name, params.Bits)
		}
		return graph.QuantType(dt, params.GroupSize, logical...), nil
	}
}

// mlxModule is the module path MLX's quantization block uses for a canonical weight.
func mlxModule(name string) string {
	if name == "lm_head" {
		return "language_model.lm_head"
	}
	return "language_model.model." + strings.Replace(name, "mlp.experts.", "mlp.switch_mlp.", 1)
}

func last(s graph.Shape) graph.Dim { return s[len(s)-1] }
