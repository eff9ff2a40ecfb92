package exec_test

import (
	"context"
	"testing"

	"pistil/exec"
)

// BenchmarkDecodeTiny measures one decode step of the golden tiny MLX model on the CPU
// backend (plan replay overhead dominates at this size).
func BenchmarkDecodeTiny(b *testing.B) { benchDecodeTiny(b, exec.Options{}) }

// benchDecodeTiny times decode steps of the golden tiny MLX model opened with o.
func benchDecodeTiny(b *testing.B, o exec.Options) {
	m, err := exec.Open(goldenDir+"mlx-q4", o)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession(b.N + 8)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Prefill(ctx, []int32{1, 2, 3, 4}, exec.PrefillOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Decode(ctx, int32(i%500)); err != nil {
			b.Fatal(err)
		}
	}
}
