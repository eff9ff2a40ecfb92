// Package synth writes random checkpoints of exact model shapes in the layouts pistil
// reads (MLX 4-bit, Hugging Face bf16), so that speed can be measured and the runtime
// exercised without downloading weights. Values are random but scaled like a trained model
// (unit-variance embeddings, 1/sqrt(fan-in) matrices, norm weights near 1), so activations
// stay well scaled and generation yields varied tokens; routing on random router weights
// is close to uniform over experts, which a trained router is not.
package synth

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"pistil/models/qwen35moe"
)

// Preset is a named set of model dimensions.
type Preset struct {
	Name string
	// Text is the text config in Hugging Face field names (as make_golden.py writes it).
	Text map[string]any
}

// dims are the fields make_golden.py's PRESETS vary; full is the real 35B-A3B.
type dims struct {
	vocab, hidden, layers, interval, heads, kvHeads, headDim int
	linK, linV, linKDim, linVDim, conv                       int
	experts, perTok, moeInter, sharedInter                   int
	mropeSection                                             []int
}

var presets = map[string]dims{
	// ../shared/golden/make_golden.py "tiny": every structural feature at toy width.
	"tiny": {vocab: 512, hidden: 192, layers: 8, interval: 4, heads: 8, kvHeads: 1, headDim: 64,
		linK: 2, linV: 4, linKDim: 32, linVDim: 64, conv: 4, experts: 16, perTok: 4, moeInter: 64, sharedInter: 128,
		mropeSection: []int{3, 3, 2}},
	// make_golden.py "wide": the real per-layer widths, four layers.
	"wide": {vocab: 4096, hidden: 2048, layers: 4, interval: 4, heads: 16, kvHeads: 2, headDim: 256,
		linK: 16, linV: 32, linKDim: 128, linVDim: 128, conv: 4, experts: 32, perTok: 8, moeInter: 512, sharedInter: 512,
		mropeSection: []int{11, 11, 10}},
	// Qwen3.6-35B-A3B (qwen35moe.Default, model-spec.md §1.1).
	"full": fullDims(),
}

func fullDims() dims {
	c := qwen35moe.Default()
	return dims{vocab: c.VocabSize, hidden: c.HiddenSize, layers: c.NumLayers, interval: c.FullAttentionInterval,
		heads: c.NumHeads, kvHeads: c.NumKVHeads, headDim: c.HeadDim,
		linK: c.LinearNumKeyHeads, linV: c.LinearNumValueHeads, linKDim: c.LinearKeyHeadDim, linVDim: c.LinearValueHeadDim,
		conv: c.LinearConvKernel, experts: c.NumExperts, perTok: c.NumExpertsPerTok, moeInter: c.MoEIntermediate,
		sharedInter: c.SharedIntermediate, mropeSection: []int{11, 11, 10}}
}

// PresetNames lists the presets.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupPreset returns a preset's text config.
func LookupPreset(name string) (*Preset, error) {
	d, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	layerTypes := make([]string, d.layers)
	for i := range layerTypes {
		layerTypes[i] = "linear_attention"
		if (i+1)%d.interval == 0 {
			layerTypes[i] = "full_attention"
		}
	}
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "hidden_act": "silu", "attention_bias": false,
		"vocab_size": d.vocab, "hidden_size": d.hidden, "num_hidden_layers": d.layers,
		"layer_types": layerTypes, "full_attention_interval": d.interval,
		"num_attention_heads": d.heads, "num_key_value_heads": d.kvHeads, "head_dim": d.headDim,
		"linear_num_key_heads": d.linK, "linear_num_value_heads": d.linV,
		"linear_key_head_dim": d.linKDim, "linear_value_head_dim": d.linVDim, "linear_conv_kernel_dim": d.conv,
		"num_experts": d.experts, "num_experts_per_tok": d.perTok,
		"moe_intermediate_size": d.moeInter, "shared_expert_intermediate_size": d.sharedInter,
		"rms_norm_eps": 1e-6, "tie_word_embeddings": false, "max_position_embeddings": 262144,
		"partial_rotary_factor": 0.25,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
			"mrope_section": d.mropeSection, "mrope_interleaved": true},
	}
	return &Preset{Name: name, Text: text}, nil
}

// configJSON is the config.json of a layout: the Hugging Face wrapper (as the official
// release and make_golden.py write it), plus MLX's quantization block with 8-bit
// overrides for every router and shared-expert gate. eos is the text config's
// eos_token_id (<|endoftext|>, as in the real config).
func configJSON(p *Preset, layout Layout, eos int) ([]byte, *qwen35moe.Config, error) {
	text := map[string]any{"eos_token_id": eos}
	for k, v := range p.Text {
		text[k] = v
	}
	top := map[string]any{
		"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": text, "vision_config": map[string]any{"model_type": "qwen3_5_moe_vision"},
		"tie_word_embeddings": false, "torch_dtype": "bfloat16",
	}
	if layout == MLXQ4 {
		q := map[string]any{"group_size": groupSize, "bits": 4, "mode": "affine"}
		for i := 0; i < p.Text["num_hidden_layers"].(int); i++ {
			for _, m := range eightBitModules {
				q[fmt.Sprintf("language_model.model.layers.%d.%s", i, m)] = map[string]any{"group_size": groupSize, "bits": 8}
			}
		}
		top["quantization"] = q
		top["quantization_config"] = q
	}
	js, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := qwen35moe.ParseConfig(js)
	if err != nil {
		return nil, nil, fmt.Errorf("preset %s: %w", p.Name, err)
	}
	return append(js, '\n'), cfg, nil
}
