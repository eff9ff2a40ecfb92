package qwen35moe

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"

	"pistil/internal/fixtures"
)

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// goldenConfig is the tiny golden checkpoint's config.json as a map to edit.
func goldenConfig(t testing.TB, layout string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(fixtures.Path("golden/tiny-s1/" + layout + "/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The config: a billion layers and no layer_types used to allocate the layer list
// before any check and die with "fatal error: out of memory". Every size is bounded now,
// and the error names the field.
func TestHostileSizesAreBounded(t *testing.T) {
	for _, c := range []struct{ field, want string }{
		{"num_hidden_layers", "num_hidden_layers = 1000000000"},
		{"hidden_size", "hidden_size = 1000000000"},
		{"vocab_size", "vocab_size = 1000000000"},
		{"num_experts", "num_experts = 1000000000"},
		{"head_dim", "head_dim = 1000000000"},
		{"moe_intermediate_size", "moe_intermediate_size = 1000000000"},
		{"max_position_embeddings", "max_position_embeddings = 1000000000000"},
	} {
		for _, layout := range []string{"hf", "mlx-q4"} {
			cfg := goldenConfig(t, layout)
			text := cfg
			if tc, ok := cfg["text_config"].(map[string]any); ok {
				text = tc
			}
			delete(text, "layer_types")
			text["full_attention_interval"] = 4
			if c.field == "max_position_embeddings" {
				text[c.field] = 1e12
			} else {
				text[c.field] = 1e9
			}
			data, _ := json.Marshal(cfg)
			var err error
			n := allocated(func() { _, err = ParseConfig(data) })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s: %v", layout, c.field, err)
			}
			if n > 1<<20+uint64(64*len(data)) {
				t.Errorf("%s %s: parsing allocated %d bytes", layout, c.field, n)
			}
		}
	}
	for _, bad := range []string{
		`{"model_type":"qwen3_5_moe_text","hidden_size":8,"num_hidden_layers":-1}`,
		`{"model_type":"qwen3_5_moe_text","hidden_size":8,"num_hidden_layers":2,"layer_types":["full_attention"]}`,
		`{"model_type":"qwen3_5_moe_text","hidden_size":8,"rms_norm_eps":-1}`,
		`{"model_type":"qwen3_5_moe_text","hidden_size":8,"partial_rotary_factor":7}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzParseConfig: any bytes, and mutations of the real configs, parse or fail without a
// panic; what is accepted is within the bounds, its layer list matches its layer count,
// and parsing allocates in proportion to the input, never to the sizes it claims.
func FuzzParseConfig(f *testing.F) {
	for _, layout := range []string{"hf", "mlx-q4"} {
		data, _ := json.Marshal(goldenConfig(f, layout))
		f.Add(data)
	}
	f.Add([]byte(`{"text_config":{"num_hidden_layers":1000000000,"full_attention_interval":4}}`))
	f.Add([]byte(`{"model_type":"qwen3_5_moe_text","layer_types":["full_attention"],"num_hidden_layers":1}`))
	f.Add([]byte(`{"quantization":{"group_size":64,"bits":4,"x":{"group_size":1e9,"bits":4}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c *Config
		var err error
		n := allocated(func() { c, err = ParseConfig(data) })
		if n > 4<<20+uint64(256*len(data)) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			return
		}
		if len(c.Layers) != c.NumLayers {
			t.Fatalf("accepted %d layers for num_hidden_layers %d", len(c.Layers), c.NumLayers)
		}
		for _, b := range configBounds {
			if v := b.get(c); v < 0 || v > b.max {
				t.Fatalf("accepted %s = %d", b.name, v)
			}
		}
	})
}
