package passes_test

import (
	"fmt"
	"testing"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/plan"
)

// On the 35B-A3B's shapes, chunked-delta (on by default) puts the 30 GDN layers'
// gated_delta of a prefill step on gated_delta_chunked on the CUDA target, each on a grid
// of 4 groups of 32 state columns for each of its 32 value heads; off, they stay on the
// recurrent gated_delta; Metal, which has no chunked kernel, keeps the recurrent one
// with the pass on; and a decode step keeps the recurrent kernel (one token: nothing to
// chunk).
func TestChunkedDeltaChoosesTheChunkedKernel(t *testing.T) {
	cfg := qwen35moe.Default()
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{WeightType: qwen35moe.MLXWeightType(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	on := passes.Config{}
	off := passes.Config{Off: map[string]bool{"chunked-delta": true}}
	kernelsOf := func(target string, T int, cfg passes.Config) map[string]int {
		t.Helper()
		p := compileStep(t, g, target, T, cfg)
		got := map[string]int{}
		for _, d := range p.Dispatches {
			if d.Op != "gated_delta" {
				continue
			}
			got[d.Kernel]++
			if want := [3]int{128 / kernels.DeltaChunkColumns, 32, 1}; d.Kernel == kernels.KernelGatedDeltaChunked && d.Grid != want {
				t.Errorf("dispatch %d: gated_delta_chunked on grid %v, want %v", d.Index, d.Grid, want)
			}
		}
		return got
	}
	for _, T := range []int{2, 64, 1024} {
		t.Run(fmt.Sprintf("T=%d", T), func(t *testing.T) {
			if got := kernelsOf("cuda", T, on); got[kernels.KernelGatedDeltaChunked] != 30 || len(got) != 1 {
				t.Errorf("cuda, default (on): gated_delta kernels %v, want gated_delta_chunked in all 30 GDN layers", got)
			}
			if got := kernelsOf("cuda", T, off); got[kernels.KernelGatedDelta] != 30 || len(got) != 1 {
				t.Errorf("cuda, off: gated_delta kernels %v, want gated_delta in all 30 GDN layers", got)
			}
			if got := kernelsOf("metal", T, on); got[kernels.KernelGatedDelta] != 30 || len(got) != 1 {
				t.Errorf("metal, on: gated_delta kernels %v, want gated_delta in all 30 GDN layers", got)
			}
		})
	}
	if got := kernelsOf("cuda", 1, on); got[kernels.KernelGatedDelta] != 30 || len(got) != 1 {
		t.Errorf("decode, on: gated_delta kernels %v, want gated_delta in all 30 GDN layers", got)
	}
}

// compileStep compiles g's step of T tokens (decode for 1, else prefill, last logits only)
// for the target under cfg.
func compileStep(t *testing.T, g *graph.Graph, target string, T int, cfg passes.Config) *plan.Plan {
	t.Helper()
	name := "prefill"
	if T == 1 {
		name = "decode"
	}
	p, err := passes.Compile(g, ops.Default, passes.Phase{Name: name, Tokens: T, LastLogitsOnly: true, Backend: target}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
