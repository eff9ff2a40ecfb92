package exec_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/verify"
)

// The [cpu] kernels switch reaches the CPU backend: the quantized model matches the
// transformers golden with the reference kernels as it does with the fast ones, and an
// unknown setting is refused when the model is opened.
func TestKernelsSetting(t *testing.T) {
	text, err := os.ReadFile("../pipeline.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), `kernels = "fast"`) {
		t.Fatal(`pipeline.toml has no [cpu] kernels = "fast" line to switch`)
	}
	dir := t.TempDir()
	for _, kernels := range []string{"reference", "turbo"} {
		file := filepath.Join(dir, kernels+".toml")
		edited := strings.Replace(string(text), `kernels = "fast"`, `kernels = "`+kernels+`"`, 1)
		if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		if kernels == "turbo" {
			if _, err := exec.Open(goldenDir+"mlx-q4", exec.Options{PipelineFile: file}); err == nil || !strings.Contains(err.Error(), "cpu.kernels") {
				t.Errorf("kernels = turbo: error %v, want one naming cpu.kernels", err)
			}
			continue
		}
		m, ref := openTiny(t, "mlx-q4", exec.Options{AllLogits: true, Chunk: 96, PipelineFile: file})
		rep, err := verify.Run(context.Background(), m, ref, verify.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.MaxAbsErr >= 2e-3 || rep.Top1Agree != 1 || !rep.GreedyMatch {
			t.Fatalf("reference kernels do not match the golden:\n%s", rep)
		}
	}
}

// BenchmarkDecodeTinyKernels is BenchmarkDecodeTiny with each [cpu] kernels setting.
func BenchmarkDecodeTinyKernels(b *testing.B) {
	text, err := os.ReadFile("../pipeline.toml")
	if err != nil {
		b.Fatal(err)
	}
	for _, kernels := range []string{"reference", "fast"} {
		b.Run(kernels, func(b *testing.B) {
			file := filepath.Join(b.TempDir(), "pipeline.toml")
			edited := strings.Replace(string(text), `kernels = "fast"`, `kernels = "`+kernels+`"`, 1)
			if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
				b.Fatal(err)
			}
			benchDecodeTiny(b, exec.Options{PipelineFile: file})
		})
	}
}
