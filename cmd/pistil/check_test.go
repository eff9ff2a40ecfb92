package main

import (
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/cpu"
	"pistil/models/safetensors"
	"pistil/ops"
)

var goldenMLX = fixtures.Path("golden/tiny-s1/mlx-q4")

func TestCheckPassesOnBothLayouts(t *testing.T) {
	for _, layout := range []string{"hf", "mlx-q4"} {
		dir := (fixtures.Path("golden/tiny-s1") + "/") + layout
		if err := runCheck([]string{"--model", dir, "--reference", dir + "/reference.safetensors", "--chunk", "32"}); err != nil {
			t.Errorf("%s: %v", layout, err)
		}
	}
}

// TestCheckFailsOnCorruptedCopies: a checkpoint whose experts are stored in the wrong order
// loads (nothing about it is malformed) but check must fail on the numbers; a tensor of the
// wrong shape must be refused with its name.
func TestCheckFailsOnCorruptedCopies(t *testing.T) {
	ref := goldenMLX + "/reference.safetensors"

	flipped := copyCheckpoint(t, func(name string, shape []int, data []byte) ([]int, []byte) {
		if !strings.HasPrefix(name, "language_model.model.layers.0.mlp.switch_mlp.") {
			return shape, data
		}
		// Swap experts 0 and 1 (the leading dimension) of every stacked tensor.
		per := len(data) / shape[0]
		out := append([]byte(nil), data...)
		copy(out[:per], data[per:2*per])
		copy(out[per:2*per], data[:per])
		return shape, out
	})
	err := runCheck([]string{"--model", flipped, "--reference", ref})
	if err == nil || !strings.Contains(err.Error(), "FAIL") {
		t.Fatalf("flipped expert order: check said %v, want a FAIL", err)
	}

	const victim = "language_model.model.layers.2.linear_attn.norm.weight"
	reshaped := copyCheckpoint(t, func(name string, shape []int, data []byte) ([]int, []byte) {
		if name != victim {
			return shape, data
		}
		return []int{shape[0] / 2}, data[:len(data)/2]
	})
	err = runCheck([]string{"--model", reshaped, "--reference", ref})
	if err == nil || !strings.Contains(err.Error(), "linear_attn.norm") {
		t.Fatalf("wrong shape: check said %v, want an error naming the tensor", err)
	}
}

// copyCheckpoint writes the golden MLX checkpoint to a temporary directory, passing every
// tensor through edit.
func copyCheckpoint(t *testing.T, edit func(name string, shape []int, data []byte) ([]int, []byte)) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(goldenMLX, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := safetensors.Open(filepath.Join(goldenMLX, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var specs []safetensors.Spec
	var datas [][]byte
	for _, name := range src.Header.Names() {
		info, _ := src.Info(name)
		data, err := src.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		shape, data := edit(name, info.Shape, data)
		specs = append(specs, safetensors.Spec{Name: name, DType: info.DType, Shape: shape})
		datas = append(datas, data)
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, src.Header.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if err := w.Write(s.Name, datas[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCheckInt16AtItsTolerance: with int16 activations in decode, check holds the golden
// mlx-q4 fixture to the int16 tolerance in every mode (whole prefill runs the one-row
// kernel too, for experts that one token was routed to), and where the machine has the
// int16 kernel the exact tolerance fails with --chunk 1 (every step one-row matmuls): the
// flag is not a way around the test.
func TestCheckInt16AtItsTolerance(t *testing.T) {
	pipe := filepath.Join(t.TempDir(), "pipeline.toml")
	if err := os.WriteFile(pipe, []byte("[cpu]\nactivations = \""+ops.ActivationsInt16+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--model", goldenMLX, "--reference", goldenMLX + "/reference.safetensors", "--pipeline", pipe}
	for _, mode := range [][]string{nil, {"--chunk", "1"}, {"--chunk", "7"}, {"--chunk", "32"}, {"--decode-from", "3"}} {
		args := append(append(append([]string(nil), base...), mode...), "--tolerance", "int16")
		if err := runCheck(args); err != nil {
			t.Errorf("int16 %v: %v", mode, err)
		}
	}
	if !ops.HasInt16Kernel() {
		t.Logf("no int16 kernel on this machine: the float32 kernels ran")
		return
	}
	if err := runCheck(append(base, "--chunk", "1")); err == nil || !strings.Contains(err.Error(), "FAIL") {
		t.Errorf("int16 --chunk 1 at the exact tolerance: check said %v, want a FAIL", err)
	}
}

// TestCheckInt8AtItsTolerance: with int8 activations, check holds the golden mlx-q4 fixture
// to the int8 tolerance in every prefill mode, with each int8 kernel this machine has
// (the AVX2 one, its row kernel included under "int8-all", forced through
// cpu.Int8KernelEnv on an AVX-512 VNNI machine), and (where an int8 kernel runs at all)
// the exact tolerance fails: the flag is not a way around the test.
func TestCheckInt8AtItsTolerance(t *testing.T) {
	for _, activations := range []string{ops.ActivationsInt8, ops.ActivationsInt8All} {
		t.Run(activations, func(t *testing.T) { checkInt8AtItsTolerance(t, activations) })
	}
}

// checkInt8AtItsTolerance is TestCheckInt8AtItsTolerance for one activations choice
// ("int8-all" runs decode's one-row matmuls in int8 too: every --chunk 1 step).
func checkInt8AtItsTolerance(t *testing.T, activations string) {
	pipe := filepath.Join(t.TempDir(), "pipeline.toml")
	if err := os.WriteFile(pipe, []byte("[cpu]\nactivations = \""+activations+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--model", goldenMLX, "--reference", goldenMLX + "/reference.safetensors", "--pipeline", pipe}
	best := ops.Int8KernelName()
	if best == "" {
		t.Logf("no int8 kernel on this machine: the float32 kernels ran")
	}
	t.Cleanup(func() {
		if best != "" {
			ops.SetInt8Kernel(best)
		}
	})
	for _, kernel := range []string{"avx2", "avx512vnni"} {
		if ops.SetInt8Kernel(kernel) != nil {
			t.Logf("%s: not on this machine", kernel)
			continue
		}
		t.Setenv(cpu.Int8KernelEnv, kernel)
		for _, mode := range [][]string{nil, {"--chunk", "1"}, {"--chunk", "7"}, {"--chunk", "32"}, {"--decode-from", "3"}} {
			args := append(append(append([]string(nil), base...), mode...), "--tolerance", "int8")
			if err := runCheck(args); err != nil {
				t.Errorf("int8 (%s) %v: %v", kernel, mode, err)
			}
		}
		if err := runCheck(append(base, "--chunk", "7")); err == nil || !strings.Contains(err.Error(), "FAIL") {
			t.Errorf("int8 (%s) at the exact tolerance: check said %v, want a FAIL", kernel, err)
		}
		// Every --chunk 1 step is one-row matmuls: under "int8-all" the kernel's row kernel
		// runs them, so exact fails there too (it would pass on a kernel without one).
		if activations == ops.ActivationsInt8All {
			if err := runCheck(append(base, "--chunk", "1")); err == nil || !strings.Contains(err.Error(), "FAIL") {
				t.Errorf("int8-all (%s) --chunk 1 at the exact tolerance: check said %v, want a FAIL", kernel, err)
			}
		}
	}
	t.Setenv(cpu.Int8KernelEnv, "avx9")
	if err := runCheck(base); err == nil || !strings.Contains(err.Error(), `"avx9"`) {
		t.Errorf("an unknown int8 kernel: check said %v, want an error naming it", err)
	}
}

// TestCheckBF16KVCache: a bf16 KV cache, from the flag and from pipeline.toml, holds both
// golden layouts to the bf16-kv bound on every path (whole, chunks of 7, decode from 40),
// and misses the exact one: the cache's rounding is really in the logits.
func TestCheckBF16KVCache(t *testing.T) {
	pipe := filepath.Join(t.TempDir(), "pipeline.toml")
	if err := os.WriteFile(pipe, []byte("[state]\nkv_cache = \"bf16\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"hf", "mlx-q4"} {
		dir := fixtures.Path("golden/tiny-s1/" + layout)
		base := []string{"--model", dir, "--reference", dir + "/reference.safetensors"}
		for _, mode := range [][]string{nil, {"--chunk", "7"}, {"--decode-from", "40"}} {
			args := append(append(append([]string(nil), base...), mode...), "--kv-cache", "bf16", "--tolerance", "bf16-kv")
			if err := runCheck(args); err != nil {
				t.Errorf("%s %v: %v", layout, mode, err)
			}
		}
		if err := runCheck(append(append([]string(nil), base...), "--pipeline", pipe, "--tolerance", "bf16-kv")); err != nil {
			t.Errorf("%s with [state] kv_cache = \"bf16\": %v", layout, err)
		}
		if err := runCheck(append(append([]string(nil), base...), "--pipeline", pipe)); err == nil || !strings.Contains(err.Error(), "max abs error") {
			t.Errorf("%s with a bf16 KV cache at the exact tolerance: check said %v, want a FAIL on max abs error", layout, err)
		}
	}
	// Every attention kernel set of this machine over the bf16 cache: "go-bf16" and
	// "avx512bf16" round its queries and probabilities to bf16 as well, within the same
	// tolerance.
	for _, name := range ops.AttentionKernelsHere() {
		pipe := filepath.Join(t.TempDir(), "pipeline.toml")
		if err := os.WriteFile(pipe, []byte("[cpu]\nattention_kernel = \""+name+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, layout := range []string{"hf", "mlx-q4"} {
			dir := fixtures.Path("golden/tiny-s1/" + layout)
			for _, mode := range [][]string{nil, {"--chunk", "7"}, {"--decode-from", "40"}} {
				args := append([]string{"--model", dir, "--reference", dir + "/reference.safetensors", "--pipeline", pipe, "--kv-cache", "bf16", "--tolerance", "bf16-kv"}, mode...)
				if err := runCheck(args); err != nil {
					t.Errorf("attention_kernel %q, %s %v: %v", name, layout, mode, err)
				}
			}
		}
	}
	dir := fixtures.Path("golden/tiny-s1/mlx-q4")
	if err := runCheck([]string{"--model", dir, "--reference", dir + "/reference.safetensors", "--kv-cache", "f16"}); err == nil || !strings.Contains(err.Error(), "--kv-cache") {
		t.Errorf("--kv-cache f16: check said %v, want an error naming the flag", err)
	}
}
