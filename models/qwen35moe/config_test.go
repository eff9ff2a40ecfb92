package qwen35moe

import (
	"testing"

	"pistil/internal/fixtures"
)

func TestDefaultConfig(t *testing.T) {
	c := Default()
	if c.NumFullAttention() != 10 || len(c.Layers) != 40 || c.Layers[3] != FullAttention || c.Layers[0] != LinearAttention {
		t.Fatalf("layer layout wrong: %v", c.Layers)
	}
	if c.ConvDim() != 8192 || c.RotaryDim() != 64 {
		t.Fatalf("derived dims: conv %d rotary %d", c.ConvDim(), c.RotaryDim())
	}
	if p := c.Quant.For("language_model.model.layers.7.mlp.gate"); p.Bits != 8 {
		t.Fatalf("router override: %+v", p)
	}
}

func TestGoldenConfigs(t *testing.T) {
	for _, layout := range []string{"hf", "mlx-q4"} {
		c, err := LoadConfig((fixtures.Path("golden/tiny-s1") + "/") + layout)
		if err != nil {
			t.Fatal(err)
		}
		if c.HiddenSize != 192 || c.NumLayers != 8 || c.Layers[3] != FullAttention || c.RopeTheta != 1e7 || c.RotaryDim() != 16 {
			t.Fatalf("%s: %+v", layout, c)
		}
		if (layout == "mlx-q4") != (c.Quant != nil) {
			t.Fatalf("%s: quant %+v", layout, c.Quant)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, bad := range []string{
		`[]`,
		`{"model_type":"llama"}`,
		`{"model_type":"qwen3_5_moe_text","hidden_size":8}`,
		`{"text_config":{"hidden_size":8,"num_hidden_layers":2,"layer_types":["full_attention","bogus"]}}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%s) accepted", bad)
		}
	}
}
