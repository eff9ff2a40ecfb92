//go:build linux

package cuda

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"pistil/exec"
	"pistil/pipeline"
)

// Speed on a real checkpoint: PISTIL_BENCH_MODEL names its folder (for example the
// full-size synthetic model of `pistil synth --preset full --layout mlx-q4`); without it,
// or without a GPU, the benchmarks skip. Run them with a fixed count, e.g.
//   cuda.test -test.run '^$' -test.bench . -test.benchtime 64x
// Configurations: the default pipeline ("fused") with CUDA graphs on and off, the
// default pipeline with the tensor-core GEMMs off ("fused,simt": every matmul on the SIMT
// tiles), and every fusion pass off ("unfused") with graphs on.

// NoFusion are the pass switches that leave the plans with primitive ops only.
var NoFusion = []string{"fuse-gdn-gates/off", "fuse-conv-silu/off", "fuse-slice-l2/off", "fuse-gdn-prologue/off", "fuse-conv-l2/off", "fuse-delta-norm/off", "fuse-norm-out-proj/off",
	"fuse-qk-norm-rope/off", "fuse-slice-rope/off", "fuse-rope-append/off", "fuse-attn-gate/off", "fuse-swiglu/off", "fuse-router/off", "fuse-moe-combine/off",
	"fuse-shared-gate/off", "fuse-projections/off", "fuse-add-norm/off"}

var benchModels sync.Map // "graphs=on|off" -> *exec.Model

// benchConfig is one way of compiling and running the model.
type benchConfig struct {
	name          string
	fused, graphs bool
	simt          bool // tensor-cores pass off: the SIMT tiles
}

var benchConfigs = []benchConfig{{"fused/graphs=on", true, true, false}, {"fused/graphs=off", true, false, false},
	{"fused,simt/graphs=on", true, true, true}, {"unfused/graphs=on", false, true, false}}

func benchModel(b *testing.B, cfg benchConfig) *exec.Model {
	dir := os.Getenv("PISTIL_BENCH_MODEL")
	if dir == "" {
		b.Skip("set PISTIL_BENCH_MODEL to a checkpoint folder")
	}
	if _, err := loadDriver(); err != nil {
		b.Skipf("no GPU: %v", err)
	}
	key := cfg.name
	if m, ok := benchModels.Load(key); ok {
		return m.(*exec.Model)
	}
	var passFlags []string
	if !cfg.fused {
		passFlags = NoFusion
	}
	if cfg.simt {
		passFlags = append(passFlags, "tensor-cores/off")
	}
	o, err := pipeline.Default().ExecOptions("cuda", passFlags)
	if err != nil {
		b.Fatal(err)
	}
	o.Graphs = cfg.graphs
	o.TokenHandoff = !strings.HasSuffix(cfg.name, "handoff=off")
	o.HandoffInOrder = strings.HasSuffix(cfg.name, "handoff=in-order")
	m, err := exec.Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	benchModels.Store(key, m)
	return m
}

// promptIDs is a deterministic prompt of n ordinary token ids.
func promptIDs(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(100 + (i*7919)%20000)
	}
	return ids
}

func BenchmarkDecode(b *testing.B) {
	for _, cfg := range benchConfigs {
		if cfg.simt {
			continue // decode steps have one row: the switch changes no decode plan
		}
		for _, ctxLen := range []int{1, 4096} {
			b.Run(fmt.Sprintf("%s/context=%d", cfg.name, ctxLen), func(b *testing.B) {
				m := benchModel(b, cfg)
				s, err := m.NewSession(ctxLen + b.N + 8)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if err := s.Prefill(ctx, promptIDs(ctxLen), exec.PrefillOptions{}); err != nil {
					b.Fatal(err)
				}
				if err := s.Decode(ctx, 101); err != nil { // binds the decode program to this state
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := s.Decode(ctx, int32(100+i%1000)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

func BenchmarkPrefill(b *testing.B) {
	for _, cfg := range benchConfigs {
		for _, n := range []int{512, 4096} {
			b.Run(fmt.Sprintf("%s/tokens=%d", cfg.name, n), func(b *testing.B) {
				m := benchModel(b, cfg)
				s, err := m.NewSession(n + 8)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				ids := promptIDs(n)
				if err := s.Prefill(ctx, ids, exec.PrefillOptions{}); err != nil { // warm-up: binds the programs
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s.Reset()
					if err := s.Prefill(ctx, ids, exec.PrefillOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkProfile prints where the time of a 512-token prefill chunk and of a decode
// step at a 4K context goes, per op and kernel (launched one by one, timed by events).
func BenchmarkProfile(b *testing.B) {
	m := benchModel(b, benchConfigs[1])
	s, err := m.NewSession(4096 + 512 + b.N + 8)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Prefill(ctx, promptIDs(4096), exec.PrefillOptions{}); err != nil {
		b.Fatal(err)
	}
	prof := StartProfile()
	if err := s.Prefill(ctx, promptIDs(512), exec.PrefillOptions{}); err != nil {
		b.Fatal(err)
	}
	StopProfile()
	fmt.Printf("prefill chunk of 512 at context 4096:\n%s\n", prof)
	prof = StartProfile()
	defer StopProfile()
	for i := 0; i < b.N; i++ {
		if err := s.Decode(ctx, int32(100+i)); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("decode at context ~4600:\n%s\n", prof)
}

// BenchmarkGenerate is decode through exec's generation loop with greedy sampling:
// token handoff on, running ahead (the GPU samples, step k+1 is queued before token k is
// read, 4 bytes come back per step), in order (each step queued after the token before
// it is read), and off (every step's logits come back and the host samples). tok/s
// counts decode steps.
func BenchmarkGenerate(b *testing.B) {
	for _, mode := range []string{"ahead", "in-order", "off"} {
		for _, ctxLen := range []int{1, 4096} {
			b.Run(fmt.Sprintf("handoff=%s/context=%d", mode, ctxLen), func(b *testing.B) {
				cfg := benchConfigs[0]
				if mode != "ahead" {
					cfg = benchConfig{"fused/graphs=on/handoff=" + mode, true, true, false}
				}
				m := benchModel(b, cfg)
				s, err := m.NewSession(ctxLen + b.N + 8)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if err := s.Prefill(ctx, promptIDs(ctxLen), exec.PrefillOptions{}); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				res, err := s.Generate(ctx, nil, exec.GenerateOptions{MaxTokens: b.N + 1})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(res.DecodeSteps)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
