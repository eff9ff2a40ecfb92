package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/models/qwen35moe"
)

// The preset, then the dims file, then the flags given: each later source wins, and the
// checkpoint's config says so.
func TestSynthDimsFromFlagsAndFile(t *testing.T) {
	dir := t.TempDir()
	dims := filepath.Join(dir, "dims.json")
	if err := os.WriteFile(dims, []byte(`{"hidden_size": 128, "num_experts": 8, "num_experts_per_tok": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "ck")
	err := runSynth([]string{"--preset", "tiny", "--config", dims, "--experts", "4", "--layout", "mlx-q8",
		"--head-dim", "128", "--linear-value-dim", "32", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	c, err := qwen35moe.LoadConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 128 || c.NumExperts != 4 || c.NumExpertsPerTok != 2 || c.HeadDim != 128 || c.LinearValueHeadDim != 32 || c.NumLayers != 8 {
		t.Errorf("config: hidden %d experts %d top-k %d head dim %d value dim %d layers %d", c.HiddenSize, c.NumExperts,
			c.NumExpertsPerTok, c.HeadDim, c.LinearValueHeadDim, c.NumLayers)
	}
	if c.Quant == nil || c.Quant.Bits != 8 {
		t.Errorf("mlx-q8 config quantization %+v", c.Quant)
	}
}

func TestSynthRejectsBadDims(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hidden", "0"}, "--hidden"},
		{[]string{"--heads", "6", "--kv-heads", "4"}, "--kv-heads"},
		{[]string{"--top-k", "32"}, "--top-k"},
		{[]string{"--config", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"--layout", "gguf"}, "gguf"},
	} {
		err := runSynth(append(tc.args, "--out", filepath.Join(dir, "x")))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v does not mention %s", tc.args, err, tc.want)
		}
	}
}
