//go:build linux

package cuda

import (
	"context"
	"fmt"
	"os"
	"testing"

	"pistil/exec"
	"pistil/pipeline"
)

// BenchmarkTurnAtDepth times a prefill of `tokens` tokens on top of `depth` tokens
// already in the cache (what an agent's turn costs to its first token, and the chunk of
// issue 11's profile), with the tile-attention pass on (attention_prefill) and off
// (attention_gqa). Each iteration prefills the depth again untimed, so only the turn is
// measured. PISTIL_BENCH_MODEL names the checkpoint, as for the other benchmarks:
//
//	cuda.test -test.run '^$' -test.bench TurnAtDepth -test.benchtime 2x
//
// (Its name leaves "Prefill" out so that -test.bench Prefill does not run it too.)
func BenchmarkTurnAtDepth(b *testing.B) {
	dir := os.Getenv("PISTIL_BENCH_MODEL")
	if dir == "" {
		b.Skip("set PISTIL_BENCH_MODEL to a checkpoint folder")
	}
	if _, err := loadDriver(); err != nil {
		b.Skipf("no GPU: %v", err)
	}
	for _, tiled := range []bool{true, false} {
		var passes []string
		if !tiled {
			passes = []string{"tile-attention/off"}
		}
		o, err := pipeline.Default().ExecOptions("cuda", passes)
		if err != nil {
			b.Fatal(err)
		}
		m, err := exec.Open(dir, o)
		if err != nil {
			b.Fatal(err)
		}
		for _, shape := range []struct{ depth, tokens int }{{4096, 512}, {12288, 200}} {
			b.Run(fmt.Sprintf("tile-attention=%v/depth=%d/tokens=%d", tiled, shape.depth, shape.tokens), func(b *testing.B) {
				s, err := m.NewSession(shape.depth + shape.tokens + 8)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				depth, turn := promptIDs(shape.depth), promptIDs(shape.depth + shape.tokens)[shape.depth:]
				run := func() {
					b.StopTimer()
					s.Reset()
					if err := s.Prefill(ctx, depth, exec.PrefillOptions{}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if err := s.Prefill(ctx, turn, exec.PrefillOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				run() // warm-up: binds the programs of every chunk size the turn uses
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
				b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/turn")
				b.ReportMetric(float64(shape.tokens*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
		if err := m.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
