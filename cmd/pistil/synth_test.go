package main

import (
	"os"
	"path/filepath"
	"slices"
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

// TestSynthTwiceIntoOneFolder: the README's synth example pasted twice works; the second
// run replaces the first's files (even of another layout) and keeps files that were in the
// folder before; a checkpoint synth did not write is refused.
func TestSynthTwiceIntoOneFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"mlx-q4", "mlx-q4", "hf"} {
		if err := runSynth([]string{"--preset", "tiny", "--layout", layout, "--seed", "1", "--out", dir}); err != nil {
			t.Fatalf("synth --layout %s: %v", layout, err)
		}
	}
	names, err := folderFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"config.json", "generation_config.json", "model.safetensors", "notes.txt", synthManifest, "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(names, want) {
		t.Errorf("folder holds %v, want %v", names, want)
	}
	if cfg, _ := os.ReadFile(filepath.Join(dir, "config.json")); strings.Contains(string(cfg), "quantization") {
		t.Errorf("the hf run left the mlx-q4 config")
	}
	if err := runModelCheck(dir); err != nil {
		t.Errorf("the rewritten checkpoint does not open: %v", err)
	}

	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "model.safetensors"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = runSynth([]string{"--preset", "tiny", "--out", foreign})
	if err == nil || !strings.Contains(err.Error(), "pistil synth did not write") {
		t.Errorf("foreign checkpoint: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(foreign, "model.safetensors")); string(data) != "x" {
		t.Errorf("the foreign checkpoint was touched")
	}
}

// runModelCheck opens the checkpoint the way generate does.
func runModelCheck(dir string) error {
	mf := modelFlags{dir: dir, backend: "cpu", workers: 1}
	m, err := mf.open(false)
	if err != nil {
		return err
	}
	return m.Close()
}
