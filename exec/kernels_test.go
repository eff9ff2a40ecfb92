package exec_test

import (
	"context"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/verify"
)

// The kernels option reaches the CPU backend: the quantized model matches the
// transformers golden with the reference kernels as it does with the fast ones, and an
// unknown setting is refused when the model is opened.
func TestKernelsSetting(t *testing.T) {
	if _, err := exec.Open(goldenDir+"mlx-q4", exec.Options{Kernels: "turbo"}); err == nil || !strings.Contains(err.Error(), "kernels") {
		t.Errorf("kernels turbo: error %v, want one naming the kernels", err)
	}
	m, ref := openTiny(t, "mlx-q4", exec.Options{AllLogits: true, Chunk: 96, Kernels: "reference"})
	rep, err := verify.Run(context.Background(), m, ref, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MaxAbsErr >= 2e-3 || rep.Top1Agree != 1 || !rep.GreedyMatch {
		t.Fatalf("reference kernels do not match the golden:\n%s", rep)
	}
}

// BenchmarkDecodeTinyKernels is BenchmarkDecodeTiny with each kernels setting.
func BenchmarkDecodeTinyKernels(b *testing.B) {
	for _, kernels := range []string{"reference", "fast"} {
		b.Run(kernels, func(b *testing.B) { benchDecodeTiny(b, exec.Options{Kernels: kernels}) })
	}
}
