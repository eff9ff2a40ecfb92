package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigMustMatchTensors: a config.json that lies about the model's scale (layers,
// vocabulary, hidden size) is refused at Open with the tensor that contradicts it, before
// anything is sized from it.
func TestConfigMustMatchTensors(t *testing.T) {
	cases := []struct {
		field string
		value any
		want  string
	}{
		{"num_hidden_layers", 4, "num_hidden_layers = 4 but the tensors hold 8 layers"},
		{"num_hidden_layers", 1000, "num_hidden_layers = 1000 but the tensors hold 8 layers"},
		{"vocab_size", 4000000, "vocab_size = 4000000 but"},
		{"hidden_size", 65536, "hidden_size = 65536 but"},
	}
	for _, src := range []string{goldenHF, goldenMLX} {
		raw, err := os.ReadFile(filepath.Join(src, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			var cfg map[string]any
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			text := cfg
			if tc, ok := cfg["text_config"].(map[string]any); ok {
				text = tc
			}
			text[c.field] = c.value
			if c.field == "num_hidden_layers" {
				delete(text, "layer_types")
				text["full_attention_interval"] = 4
			}
			dir := t.TempDir()
			abs, _ := filepath.Abs(filepath.Join(src, "model.safetensors"))
			if err := os.Symlink(abs, filepath.Join(dir, "model.safetensors")); err != nil {
				t.Fatal(err)
			}
			data, _ := json.Marshal(cfg)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			var opened error
			n := allocatedBy(func() {
				ck, err := Open(dir)
				if err == nil {
					ck.Close()
				}
				opened = err
			})
			if opened == nil || !strings.Contains(opened.Error(), c.want) {
				t.Errorf("%s %s=%v: %v", filepath.Base(src), c.field, c.value, opened)
			}
			if n > 16<<20 {
				t.Errorf("%s %s=%v: Open allocated %d bytes", filepath.Base(src), c.field, c.value, n)
			}
		}
	}
}
