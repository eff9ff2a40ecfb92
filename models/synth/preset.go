// Package synth writes random checkpoints of exact model shapes in the layouts pistil
// reads (MLX 4-bit and 8-bit, Hugging Face bf16), so that speed can be measured and the
// runtime exercised without downloading weights. Values are random but scaled like a
// trained model (unit-variance embeddings, 1/sqrt(fan-in) matrices, norm weights near 1),
// so activations stay well scaled and generation yields varied tokens; routing on random
// router weights is close to uniform over experts, which a trained router is not.
//
// The dimensions come from a preset (tiny, wide, full), optionally changed field by field
// (Dims), so any shape of the architecture can be written: the differential tests run
// the backends over a grid of them.
package synth

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"pistil/models/qwen35moe"
)

// Dims are the dimensions of a checkpoint, named as the Hugging Face text config names
// them (the JSON tags), so a dims file and a model's config.json read the same way.
type Dims struct {
	Vocab             int `json:"vocab_size"`
	Hidden            int `json:"hidden_size"`
	Layers            int `json:"num_hidden_layers"`
	AttentionInterval int `json:"full_attention_interval"` // layer i is full attention when (i+1) % interval == 0
	Heads             int `json:"num_attention_heads"`
	KVHeads           int `json:"num_key_value_heads"`
	HeadDim           int `json:"head_dim"`
	LinearKeyHeads    int `json:"linear_num_key_heads"`
	LinearValueHeads  int `json:"linear_num_value_heads"`
	LinearKeyDim      int `json:"linear_key_head_dim"`
	LinearValueDim    int `json:"linear_value_head_dim"`
	ConvKernel        int `json:"linear_conv_kernel_dim"`
	Experts           int `json:"num_experts"`
	TopK              int `json:"num_experts_per_tok"`
	ExpertWidth       int `json:"moe_intermediate_size"`
	SharedWidth       int `json:"shared_expert_intermediate_size"`
}

var presets = map[string]Dims{
	// ../shared/golden/make_golden.py "tiny": every structural feature at toy width.
	"tiny": {Vocab: 512, Hidden: 192, Layers: 8, AttentionInterval: 4, Heads: 8, KVHeads: 1, HeadDim: 64,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 32, LinearValueDim: 64, ConvKernel: 4,
		Experts: 16, TopK: 4, ExpertWidth: 64, SharedWidth: 128},
	// make_golden.py "wide": the real per-layer widths, four layers.
	"wide": {Vocab: 4096, Hidden: 2048, Layers: 4, AttentionInterval: 4, Heads: 16, KVHeads: 2, HeadDim: 256,
		LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		Experts: 32, TopK: 8, ExpertWidth: 512, SharedWidth: 512},
	// Qwen3.6-35B-A3B (qwen35moe.Default, model-spec.md §1.1).
	"full": fullDims(),
}

func fullDims() Dims {
	c := qwen35moe.Default()
	return Dims{Vocab: c.VocabSize, Hidden: c.HiddenSize, Layers: c.NumLayers, AttentionInterval: c.FullAttentionInterval,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		LinearKeyHeads: c.LinearNumKeyHeads, LinearValueHeads: c.LinearNumValueHeads,
		LinearKeyDim: c.LinearKeyHeadDim, LinearValueDim: c.LinearValueHeadDim, ConvKernel: c.LinearConvKernel,
		Experts: c.NumExperts, TopK: c.NumExpertsPerTok, ExpertWidth: c.MoEIntermediate, SharedWidth: c.SharedIntermediate}
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

// PresetDims returns a preset's dimensions.
func PresetDims(name string) (Dims, error) {
	d, ok := presets[name]
	if !ok {
		return Dims{}, fmt.Errorf("unknown preset %q (have %s)", name, strings.Join(PresetNames(), ", "))
	}
	return d, nil
}

// Field is one dimension: its flag name, its config name, what it means, and where it
// lives in Dims. Fields lists every dimension in the order errors and help print them.
type Field struct {
	Flag, Key, Meaning string
	Of                 func(*Dims) *int
}

// Fields are the dimensions, each settable by a flag of pistil synth and by its key in
// a dims file.
var Fields = []Field{
	{"vocab", "vocab_size", "vocabulary size (at least the synthetic tokenizer's 256 bytes and added tokens)", func(d *Dims) *int { return &d.Vocab }},
	{"hidden", "hidden_size", "hidden size (residual width)", func(d *Dims) *int { return &d.Hidden }},
	{"layers", "num_hidden_layers", "number of layers", func(d *Dims) *int { return &d.Layers }},
	{"attention-every", "full_attention_interval", "full attention every Nth layer (layer i when (i+1) % N == 0; the others are Gated DeltaNet)", func(d *Dims) *int { return &d.AttentionInterval }},
	{"heads", "num_attention_heads", "query heads of the full-attention layers", func(d *Dims) *int { return &d.Heads }},
	{"kv-heads", "num_key_value_heads", "key/value heads of the full-attention layers (divides the query heads)", func(d *Dims) *int { return &d.KVHeads }},
	{"head-dim", "head_dim", "attention head dim (a multiple of 8: a quarter of it is rotated, in pairs)", func(d *Dims) *int { return &d.HeadDim }},
	{"linear-key-heads", "linear_num_key_heads", "Gated DeltaNet key (and query) heads", func(d *Dims) *int { return &d.LinearKeyHeads }},
	{"linear-value-heads", "linear_num_value_heads", "Gated DeltaNet value heads (a multiple of the key heads)", func(d *Dims) *int { return &d.LinearValueHeads }},
	{"linear-key-dim", "linear_key_head_dim", "Gated DeltaNet key head dim", func(d *Dims) *int { return &d.LinearKeyDim }},
	{"linear-value-dim", "linear_value_head_dim", "Gated DeltaNet value head dim", func(d *Dims) *int { return &d.LinearValueDim }},
	{"conv-kernel", "linear_conv_kernel_dim", "Gated DeltaNet short-conv kernel size", func(d *Dims) *int { return &d.ConvKernel }},
	{"experts", "num_experts", "routed experts per layer", func(d *Dims) *int { return &d.Experts }},
	{"top-k", "num_experts_per_tok", "experts each token is routed to (at most the experts)", func(d *Dims) *int { return &d.TopK }},
	{"expert-width", "moe_intermediate_size", "routed expert MLP width", func(d *Dims) *int { return &d.ExpertWidth }},
	{"shared-width", "shared_expert_intermediate_size", "shared expert MLP width", func(d *Dims) *int { return &d.SharedWidth }},
}

// Validate checks every dimension and says which one is wrong and why.
func (d Dims) Validate() error {
	var errs []string
	for _, f := range Fields {
		if v := *f.Of(&d); v <= 0 {
			errs = append(errs, fmt.Sprintf("%s (--%s, %s) = %d: must be positive", f.Meaning, f.Flag, f.Key, v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("synth dims: %s", strings.Join(errs, "; "))
	}
	if d.Heads%d.KVHeads != 0 {
		errs = append(errs, fmt.Sprintf("query heads %d (--heads) are not a multiple of the KV heads %d (--kv-heads)", d.Heads, d.KVHeads))
	}
	if d.LinearValueHeads%d.LinearKeyHeads != 0 {
		errs = append(errs, fmt.Sprintf("linear value heads %d (--linear-value-heads) are not a multiple of the linear key heads %d (--linear-key-heads)", d.LinearValueHeads, d.LinearKeyHeads))
	}
	if d.TopK > d.Experts {
		errs = append(errs, fmt.Sprintf("top-k %d (--top-k) exceeds the %d experts (--experts)", d.TopK, d.Experts))
	}
	if d.HeadDim%8 != 0 {
		errs = append(errs, fmt.Sprintf("head dim %d (--head-dim) is not a multiple of 8: RoPE rotates a quarter of it in pairs", d.HeadDim))
	}
	if d.AttentionInterval > d.Layers {
		errs = append(errs, fmt.Sprintf("full attention every %d layers (--attention-every) with %d layers (--layers) gives no attention layer", d.AttentionInterval, d.Layers))
	}
	if len(errs) > 0 {
		return fmt.Errorf("synth dims: %s", strings.Join(errs, "; "))
	}
	return nil
}

// ReadDims applies a dims file to d: a JSON object of Fields keys (every key must be one
// of them), or a model's config.json (a Hugging Face wrapper with text_config, or a text
// config with model_type), from which the Fields keys are taken and the rest ignored.
func ReadDims(data []byte, d *Dims) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("dims file: not a JSON object: %w", err)
	}
	fields := top
	_, wrapper := top["text_config"]
	_, modelConfig := top["model_type"]
	if wrapper {
		fields = nil
		if err := json.Unmarshal(top["text_config"], &fields); err != nil {
			return fmt.Errorf("dims file: text_config: %w", err)
		}
	}
	byKey := map[string]Field{}
	for _, f := range Fields {
		byKey[f.Key] = f
	}
	var unknown []string
	for k, raw := range fields {
		f, ok := byKey[k]
		if !ok {
			unknown = append(unknown, k)
			continue
		}
		if err := json.Unmarshal(raw, f.Of(d)); err != nil {
			return fmt.Errorf("dims file: %s: want an integer: %w", k, err)
		}
	}
	if raw, ok := fields["layer_types"]; ok && (wrapper || modelConfig) {
		if _, given := fields["full_attention_interval"]; !given {
			if err := intervalOf(raw, d); err != nil {
				return err
			}
		}
	}
	if len(unknown) > 0 && !wrapper && !modelConfig {
		sort.Strings(unknown)
		keys := make([]string, len(Fields))
		for i, f := range Fields {
			keys[i] = f.Key
		}
		return fmt.Errorf("dims file: unknown keys %s (a dims file takes %s; a model config.json, with model_type or text_config, may hold others)",
			strings.Join(unknown, ", "), strings.Join(keys, ", "))
	}
	return nil
}

// intervalOf sets d's attention interval from a config's layer_types, which must follow
// the rule synth writes (full attention exactly where (i+1) % interval == 0).
func intervalOf(raw json.RawMessage, d *Dims) error {
	var types []string
	if err := json.Unmarshal(raw, &types); err != nil {
		return fmt.Errorf("dims file: layer_types: %w", err)
	}
	interval := 0
	for i, ty := range types {
		if ty == "full_attention" {
			interval = i + 1
			break
		}
	}
	for i, ty := range types {
		if want := interval > 0 && (i+1)%interval == 0; (ty == "full_attention") != want {
			return fmt.Errorf("dims file: layer_types has full attention at layers that no interval gives (layer %d is %s)", i, ty)
		}
	}
	if interval == 0 {
		return fmt.Errorf("dims file: layer_types has no full_attention layer")
	}
	d.AttentionInterval = interval
	return nil
}

// String prints the dimensions as flags of pistil synth.
func (d Dims) String() string {
	parts := make([]string, len(Fields))
	for i, f := range Fields {
		parts[i] = fmt.Sprintf("--%s %d", f.Flag, *f.Of(&d))
	}
	return strings.Join(parts, " ")
}

// rotaryDim is the number of head dims RoPE rotates (partial_rotary_factor 0.25).
func (d Dims) rotaryDim() int { return d.HeadDim / 4 }

// mropeSection splits the rotary frequencies into (t, h, w) sections as the real config
// does ([11, 11, 10] for 32): text tokens use the three alike, so it only has to add up.
func (d Dims) mropeSection() []int {
	n := d.rotaryDim() / 2
	s := []int{n / 3, n / 3, n / 3}
	for i := 0; i < n%3; i++ {
		s[i]++
	}
	return s
}

// textConfig is the text config in Hugging Face field names (as make_golden.py writes it).
func (d Dims) textConfig() map[string]any {
	layerTypes := make([]string, d.Layers)
	for i := range layerTypes {
		layerTypes[i] = "linear_attention"
		if (i+1)%d.AttentionInterval == 0 {
			layerTypes[i] = "full_attention"
		}
	}
	text := map[string]any{
		"model_type": "qwen3_5_moe_text", "hidden_act": "silu", "attention_bias": false,
		"layer_types": layerTypes, "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "max_position_embeddings": 262144,
		"partial_rotary_factor": 0.25,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
			"mrope_section": d.mropeSection(), "mrope_interleaved": true},
	}
	for _, f := range Fields {
		text[f.Key] = *f.Of(&d)
	}
	return text
}

// configJSON is the config.json of a layout: the Hugging Face wrapper (as the official
// release and make_golden.py write it), plus, for the MLX layouts, the quantization block
// with 8-bit overrides for every router and shared-expert gate (as mlx-lm writes them at
// either width). eos is the text config's eos_token_id (<|endoftext|>, as in the real
// config).
func configJSON(d Dims, layout Layout, eos int) ([]byte, *qwen35moe.Config, error) {
	text := d.textConfig()
	text["eos_token_id"] = eos
	top := map[string]any{
		"architectures": []string{"Qwen3_5MoeForConditionalGeneration"}, "model_type": "qwen3_5_moe",
		"text_config": text, "vision_config": map[string]any{"model_type": "qwen3_5_moe_vision"},
		"tie_word_embeddings": false, "torch_dtype": "bfloat16",
	}
	if bits := layout.bits(); bits > 0 {
		q := map[string]any{"group_size": groupSize, "bits": bits, "mode": "affine"}
		for i := 0; i < d.Layers; i++ {
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
		return nil, nil, fmt.Errorf("synth dims %s: %w", d, err)
	}
	return append(js, '\n'), cfg, nil
}
