// Package qwen35moe declares the Qwen3.5/3.6 MoE (35B-A3B) text model as a pistil graph:
// config parsing, the per-layer layout, and the blocks (attention, Gated DeltaNet, MoE).
// It declares the graph and never runs it.
package qwen35moe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"pistil/internal/regularfile"
)

// maxConfigBytes bounds config.json and generation_config.json (MLX's per-module
// quantization overrides make the largest ones a few hundred kB).
const maxConfigBytes = 16 << 20

// LayerKind is what mixes tokens in a layer.
type LayerKind int

const (
	// LinearAttention is a Gated DeltaNet layer.
	LinearAttention LayerKind = iota
	// FullAttention is a gated, GQA softmax-attention layer with a KV cache.
	FullAttention
)

func (k LayerKind) String() string {
	if k == FullAttention {
		return "full_attention"
	}
	return "linear_attention"
}

// Config is the text model's configuration, decoded from any of the three config.json
// shapes pistil reads (see ParseConfig). Field names follow Hugging Face.
type Config struct {
	HiddenSize            int     `json:"hidden_size"`
	NumLayers             int     `json:"num_hidden_layers"`
	NumHeads              int     `json:"num_attention_heads"`
	NumKVHeads            int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	PartialRotaryFactor   float64 `json:"partial_rotary_factor"`
	RopeTheta             float64 `json:"rope_theta"`
	LinearNumKeyHeads     int     `json:"linear_num_key_heads"`
	LinearNumValueHeads   int     `json:"linear_num_value_heads"`
	LinearKeyHeadDim      int     `json:"linear_key_head_dim"`
	LinearValueHeadDim    int     `json:"linear_value_head_dim"`
	LinearConvKernel      int     `json:"linear_conv_kernel_dim"`
	NumExperts            int     `json:"num_experts"`
	NumExpertsPerTok      int     `json:"num_experts_per_tok"`
	MoEIntermediate       int     `json:"moe_intermediate_size"`
	SharedIntermediate    int     `json:"shared_expert_intermediate_size"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	VocabSize             int     `json:"vocab_size"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	FullAttentionInterval int     `json:"full_attention_interval"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	// Layers is the kind of each layer, from layer_types when present, else from
	// full_attention_interval: layer i is full attention when (i+1) % interval == 0.
	Layers []LayerKind `json:"-"`
	// EOSTokenIDs are the ids that end generation (config, then generation_config.json).
	EOSTokenIDs []int `json:"-"`
	// Quant is the MLX quantization block, nil for an unquantized checkpoint.
	Quant *Quantization `json:"-"`
}

// Quantization is MLX's "quantization" block: defaults plus per-module overrides keyed by
// module path as written in the checkpoint (e.g. "language_model.model.layers.0.mlp.gate").
type Quantization struct {
	GroupSize int
	Bits      int
	Mode      string
	Overrides map[string]QuantParams
}

// QuantParams are the bits and group size of one module.
type QuantParams struct {
	GroupSize int `json:"group_size"`
	Bits      int `json:"bits"`
}

// For resolves a module path's parameters: its override if any, else the defaults.
func (q *Quantization) For(module string) QuantParams {
	if p, ok := q.Overrides[module]; ok {
		return p
	}
	return QuantParams{GroupSize: q.GroupSize, Bits: q.Bits}
}

// Default is Qwen3.6-35B-A3B's text config (model-spec.md §1.1), quantized as the
// mlx-community 4-bit release (group 64, 8-bit router and shared-expert gates), so that
// compiling needs no checkpoint.
func Default() *Config {
	c := &Config{
		HiddenSize: 2048, NumLayers: 40, NumHeads: 16, NumKVHeads: 2, HeadDim: 256,
		PartialRotaryFactor: 0.25, RopeTheta: 1e7,
		LinearNumKeyHeads: 16, LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		LinearConvKernel: 4, NumExperts: 256, NumExpertsPerTok: 8, MoEIntermediate: 512,
		SharedIntermediate: 512, RMSNormEps: 1e-6, VocabSize: 248320, FullAttentionInterval: 4,
		MaxPositionEmbeddings: 262144, EOSTokenIDs: []int{248046, 248044},
	}
	c.Quant = &Quantization{GroupSize: 64, Bits: 4, Mode: "affine", Overrides: map[string]QuantParams{}}
	for i := 0; i < c.NumLayers; i++ {
		for _, m := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
			c.Quant.Overrides[fmt.Sprintf("language_model.model.layers.%d.%s", i, m)] = QuantParams{GroupSize: 64, Bits: 8}
		}
	}
	if err := c.finish(nil); err != nil {
		panic(err) // the built-in config is valid by construction
	}
	return c
}

// LoadConfig reads dir/config.json and, when present, dir/generation_config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := regularfile.Read(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	genPath := filepath.Join(dir, "generation_config.json")
	gen, err := regularfile.Read(genPath, maxConfigBytes)
	switch {
	case err == nil:
		var g struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(gen, &g); err != nil {
			return nil, fmt.Errorf("%s: %w", genPath, err)
		}
		if ids, err := parseIDs(g.EOS); err == nil && len(ids) > 0 {
			c.EOSTokenIDs = mergeIDs(ids, c.EOSTokenIDs)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("model config: %w", err)
	}
	return c, nil
}

// ParseConfig decodes a config.json in any of three shapes: the Hugging Face wrapper
// (model_type qwen3_5_moe with the text model under text_config), a bare text config
// (model_type qwen3_5_moe_text), or either of those with MLX's quantization block.
func ParseConfig(data []byte) (*Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	text := data
	var mt string
	if raw, ok := top["model_type"]; ok {
		_ = json.Unmarshal(raw, &mt)
	}
	if raw, ok := top["text_config"]; ok {
		text = raw
	} else if mt != "" && mt != "qwen3_5_moe_text" && mt != "qwen3_5_moe" && mt != "qwen3_next" {
		return nil, fmt.Errorf("model_type %q is not a Qwen3.5/3.6 MoE model (want qwen3_5_moe or qwen3_5_moe_text)", mt)
	}
	c := &Config{}
	if err := json.Unmarshal(text, c); err != nil {
		return nil, fmt.Errorf("text config: %w", err)
	}
	var extra struct {
		LayerTypes []string        `json:"layer_types"`
		Rope       json.RawMessage `json:"rope_parameters"`
		EOS        json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(text, &extra); err != nil {
		return nil, fmt.Errorf("text config: %w", err)
	}
	if len(extra.Rope) > 0 {
		var rp struct {
			Theta   float64 `json:"rope_theta"`
			Partial float64 `json:"partial_rotary_factor"`
		}
		if err := json.Unmarshal(extra.Rope, &rp); err != nil {
			return nil, fmt.Errorf("rope_parameters: %w", err)
		}
		if rp.Theta != 0 {
			c.RopeTheta = rp.Theta
		}
		if rp.Partial != 0 {
			c.PartialRotaryFactor = rp.Partial
		}
	}
	for i, s := range extra.LayerTypes {
		switch s {
		case "full_attention":
			c.Layers = append(c.Layers, FullAttention)
		case "linear_attention":
			c.Layers = append(c.Layers, LinearAttention)
		default:
			return nil, fmt.Errorf("layer_types[%d] = %q: want full_attention or linear_attention", i, s)
		}
	}
	if ids, err := parseIDs(extra.EOS); err == nil {
		c.EOSTokenIDs = ids
	}
	// The top-level eos (wrapper config) and the Qwen chat stop tokens complete the set.
	if raw, ok := top["eos_token_id"]; ok {
		if ids, err := parseIDs(raw); err == nil {
			c.EOSTokenIDs = mergeIDs(c.EOSTokenIDs, ids)
		}
	}
	if raw, ok := top["quantization"]; ok {
		q, err := parseQuantization(raw)
		if err != nil {
			return nil, err
		}
		c.Quant = q
	}
	if err := c.finish(extra.LayerTypes); err != nil {
		return nil, err
	}
	return c, nil
}

func parseQuantization(raw json.RawMessage) (*Quantization, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("quantization: %w", err)
	}
	q := &Quantization{Mode: "affine", Overrides: map[string]QuantParams{}}
	for k, v := range fields {
		var err error
		switch k {
		case "group_size":
			err = json.Unmarshal(v, &q.GroupSize)
		case "bits":
			err = json.Unmarshal(v, &q.Bits)
		case "mode":
			err = json.Unmarshal(v, &q.Mode)
		default:
			var p QuantParams
			if e := json.Unmarshal(v, &p); e != nil {
				// A per-module "false" means "not quantized"; MLX writes it for skipped modules.
				var b bool
				if json.Unmarshal(v, &b) == nil && !b {
					continue
				}
				err = e
			}
			q.Overrides[k] = p
		}
		if err != nil {
			return nil, fmt.Errorf("quantization.%s: %w", k, err)
		}
	}
	if q.Mode != "affine" {
		return nil, fmt.Errorf("quantization.mode %q is not supported (only MLX affine)", q.Mode)
	}
	if q.Bits != 4 && q.Bits != 8 {
		return nil, fmt.Errorf("quantization.bits = %d: only 4 and 8 are supported", q.Bits)
	}
	if q.GroupSize <= 0 {
		return nil, fmt.Errorf("quantization.group_size = %d: must be positive", q.GroupSize)
	}
	for k, p := range q.Overrides {
		if p.Bits != 4 && p.Bits != 8 || p.GroupSize <= 0 {
			return nil, fmt.Errorf("quantization.%s: bits %d group_size %d not supported", k, p.Bits, p.GroupSize)
		}
	}
	return q, nil
}

// finish fills defaults, derives the layer layout and validates every dimension.
func (c *Config) finish(layerTypes []string) error {
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.PartialRotaryFactor == 0 {
		c.PartialRotaryFactor = 0.25
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 1e7
	}
	if c.LinearConvKernel == 0 {
		c.LinearConvKernel = 4
	}
	// Every size is bounded before anything is sized from it: a config is a file anyone
	// can edit, and num_hidden_layers = 1e9 must be an error, not an allocation.
	if err := c.checkBounds(); err != nil {
		return err
	}
	if len(c.Layers) == 0 {
		if c.FullAttentionInterval <= 0 {
			return fmt.Errorf("config has neither layer_types nor full_attention_interval")
		}
		for i := 0; i < c.NumLayers; i++ {
			kind := LinearAttention
			if (i+1)%c.FullAttentionInterval == 0 {
				kind = FullAttention
			}
			c.Layers = append(c.Layers, kind)
		}
	}
	if len(c.EOSTokenIDs) == 0 {
		c.EOSTokenIDs = []int{248046, 248044}
	}
	checks := []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.NumLayers},
		{"num_attention_heads", c.NumHeads}, {"num_key_value_heads", c.NumKVHeads},
		{"head_dim", c.HeadDim}, {"linear_num_key_heads", c.LinearNumKeyHeads},
		{"linear_num_value_heads", c.LinearNumValueHeads}, {"linear_key_head_dim", c.LinearKeyHeadDim},
		{"linear_value_head_dim", c.LinearValueHeadDim}, {"num_experts", c.NumExperts},
		{"num_experts_per_tok", c.NumExpertsPerTok}, {"moe_intermediate_size", c.MoEIntermediate},
		{"vocab_size", c.VocabSize},
	}
	for _, ck := range checks {
		if ck.v <= 0 {
			return fmt.Errorf("config field %s = %d: must be positive", ck.name, ck.v)
		}
	}
	switch {
	case len(c.Layers) != c.NumLayers:
		return fmt.Errorf("layer_types has %d entries but num_hidden_layers = %d", len(c.Layers), c.NumLayers)
	case c.NumHeads%c.NumKVHeads != 0:
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	case c.LinearNumValueHeads%c.LinearNumKeyHeads != 0:
		return fmt.Errorf("linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", c.LinearNumValueHeads, c.LinearNumKeyHeads)
	case c.NumExpertsPerTok > c.NumExperts:
		return fmt.Errorf("num_experts_per_tok %d exceeds num_experts %d", c.NumExpertsPerTok, c.NumExperts)
	case c.RotaryDim()%2 != 0 || c.RotaryDim() > c.HeadDim:
		return fmt.Errorf("rotary dim %d (head_dim %d x partial_rotary_factor %g) must be even and at most head_dim", c.RotaryDim(), c.HeadDim, c.PartialRotaryFactor)
	}
	return nil
}

// Bounds on config sizes: far above any model of this family (35B-A3B has 40 layers,
// hidden 2048, 256 experts, vocabulary 248,320), far below what would exhaust memory or
// overflow the products the graph and the session compute from them.
var configBounds = []struct {
	name string
	max  int
	get  func(c *Config) int
}{
	{"hidden_size", 1 << 16, func(c *Config) int { return c.HiddenSize }},
	{"num_hidden_layers", 1024, func(c *Config) int { return c.NumLayers }},
	{"num_attention_heads", 1024, func(c *Config) int { return c.NumHeads }},
	{"num_key_value_heads", 1024, func(c *Config) int { return c.NumKVHeads }},
	{"head_dim", 4096, func(c *Config) int { return c.HeadDim }},
	{"linear_num_key_heads", 1024, func(c *Config) int { return c.LinearNumKeyHeads }},
	{"linear_num_value_heads", 1024, func(c *Config) int { return c.LinearNumValueHeads }},
	{"linear_key_head_dim", 4096, func(c *Config) int { return c.LinearKeyHeadDim }},
	{"linear_value_head_dim", 4096, func(c *Config) int { return c.LinearValueHeadDim }},
	{"linear_conv_kernel_dim", 64, func(c *Config) int { return c.LinearConvKernel }},
	{"num_experts", 4096, func(c *Config) int { return c.NumExperts }},
	{"num_experts_per_tok", 4096, func(c *Config) int { return c.NumExpertsPerTok }},
	{"moe_intermediate_size", 1 << 17, func(c *Config) int { return c.MoEIntermediate }},
	{"shared_expert_intermediate_size", 1 << 17, func(c *Config) int { return c.SharedIntermediate }},
	{"vocab_size", 1 << 22, func(c *Config) int { return c.VocabSize }},
	{"full_attention_interval", 1024, func(c *Config) int { return c.FullAttentionInterval }},
	{"max_position_embeddings", 1 << 24, func(c *Config) int { return c.MaxPositionEmbeddings }},
}

// checkBounds refuses sizes outside configBounds (and negative ones) and the
// quantization's group sizes beyond what any format uses.
func (c *Config) checkBounds() error {
	for _, b := range configBounds {
		if v := b.get(c); v < 0 || v > b.max {
			return fmt.Errorf("config field %s = %d: must be between 0 and %d", b.name, v, b.max)
		}
	}
	if len(c.Layers) > 0 && len(c.Layers) != c.NumLayers {
		return fmt.Errorf("layer_types has %d entries but num_hidden_layers = %d", len(c.Layers), c.NumLayers)
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return fmt.Errorf("config field rms_norm_eps = %g: must be between 0 and 1", c.RMSNormEps)
	}
	if !(c.PartialRotaryFactor > 0 && c.PartialRotaryFactor <= 1) {
		return fmt.Errorf("config field partial_rotary_factor = %g: must be in (0, 1]", c.PartialRotaryFactor)
	}
	if !(c.RopeTheta > 0 && c.RopeTheta < 1e30) {
		return fmt.Errorf("config field rope_theta = %g: must be positive and finite", c.RopeTheta)
	}
	if q := c.Quant; q != nil {
		if q.GroupSize > 1<<16 {
			return fmt.Errorf("quantization.group_size = %d: at most %d", q.GroupSize, 1<<16)
		}
		for k, p := range q.Overrides {
			if p.GroupSize > 1<<16 {
				return fmt.Errorf("quantization.%s.group_size = %d: at most %d", k, p.GroupSize, 1<<16)
			}
		}
	}
	return nil
}

// RotaryDim is the number of leading head dims RoPE rotates (64 for 35B-A3B).
func (c *Config) RotaryDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// LinearKeyDim and LinearValueDim are the GDN q/k and v channel counts; ConvDim is the
// channels of the short conv (q, k and v together).
func (c *Config) LinearKeyDim() int   { return c.LinearNumKeyHeads * c.LinearKeyHeadDim }
func (c *Config) LinearValueDim() int { return c.LinearNumValueHeads * c.LinearValueHeadDim }
func (c *Config) ConvDim() int        { return 2*c.LinearKeyDim() + c.LinearValueDim() }

// NumFullAttention counts the attention layers.
func (c *Config) NumFullAttention() int {
	n := 0
	for _, k := range c.Layers {
		if k == FullAttention {
			n++
		}
	}
	return n
}

func parseIDs(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("absent")
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, err
	}
	return many, nil
}

func mergeIDs(a, b []int) []int {
	out := append([]int(nil), a...)
	for _, id := range b {
		seen := false
		for _, x := range out {
			seen = seen || x == id
		}
		if !seen {
			out = append(out, id)
		}
	}
	return out
}
