package passes_test

import (
	"fmt"
	"testing"

	"pistil/gpu"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/plan"
)

// attentionKernels counts the kernels of a plan's attention dispatches (attention and
// attention_partial), and checks the grids of attention_prefill: one group per kv head
// and query tile, the key split on z.
func attentionKernels(t *testing.T, p *plan.Plan, NH, KVH int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, d := range p.Dispatches {
		if d.Op != "attention" && d.Op != "attention_partial" {
			continue
		}
		got[d.Kernel]++
		tile := gpu.PrefillQueryTile(NH, KVH)
		switch d.Kernel {
		case kernels.KernelAttentionPrefill:
		case kernels.KernelAttentionPrefillFA2:
			tile = gpu.FA2QueryTile(NH, KVH)
		default:
			continue
		}
		tiles := (p.Tokens + tile - 1) / tile
		splits := max(d.Attrs.Int("splits"), 1)
		if want := [3]int{KVH, tiles, splits}; d.Grid != want {
			t.Errorf("dispatch %d (%s): %s on grid %v, want %v", d.Index, d.Op, d.Kernel, d.Grid, want)
		}
	}
	return got
}

// On the 35B-A3B's shapes (16 query heads over 2 kv heads, head dim 256): with
// tile-attention every prefill attention of the 10 attention layers runs as
// attention_prefill (split over key ranges for chunks of few query tiles) on Metal, and
// on CUDA over this graph's bf16 cache (the model builder's default) as
// attention_prefill_fa2 (mma-attention and fa2-attention); -pass=tile-attention/off gives back one group per (kv head, token):
// attention_gqa, or on CUDA its tensor-core twin attention_gqa_mma (mma-decode-attention);
// decode is the same plan either way; the CPU ignores the pass.
func TestTileAttentionChoosesThePrefillKernel(t *testing.T) {
	g := fullModelGraph(t)
	off := passes.Config{Off: map[string]bool{"tile-attention": true}}
	for _, target := range []string{"cuda", "metal"} {
		tiled, untiled := kernels.KernelAttentionPrefill, kernels.KernelAttentionGQA
		if target == "cuda" {
			tiled, untiled = kernels.KernelAttentionPrefillFA2, kernels.KernelAttentionGQAMMA
		}
		for _, T := range []int{2, 7, 64, 200, 512} {
			t.Run(fmt.Sprintf("%s/T=%d", target, T), func(t *testing.T) {
				ph := passes.Phase{Name: "prefill", Tokens: T, LastLogitsOnly: true, Backend: target}
				on, err := passes.Compile(g, ops.Default, ph, passes.Config{})
				if err != nil {
					t.Fatal(err)
				}
				if got := attentionKernels(t, on, 16, 2); got[tiled] != 10 || len(got) != 1 {
					t.Errorf("tile-attention on: attention kernels %v, want %s in all 10 layers", got, tiled)
				}
				p, err := passes.Compile(g, ops.Default, ph, off)
				if err != nil {
					t.Fatal(err)
				}
				if got := attentionKernels(t, p, 16, 2); got[untiled] != 10 || len(got) != 1 {
					t.Errorf("tile-attention off: attention kernels %v, want %s in all 10 layers", got, untiled)
				}
			})
		}
		t.Run(target+"/decode", func(t *testing.T) {
			ph := passes.Phase{Name: "decode", Tokens: 1, Backend: target}
			on, err := passes.Compile(g, ops.Default, ph, passes.Config{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := passes.Compile(g, ops.Default, ph, off)
			if err != nil {
				t.Fatal(err)
			}
			if a, b := planKernels(on), planKernels(p); a != b {
				t.Errorf("decode plans differ with tile-attention on and off")
			}
			if got := attentionKernels(t, on, 16, 2); got[untiled] != 10 {
				t.Errorf("decode attention kernels %v, want %s (split) in all 10 layers", got, untiled)
			}
		})
	}
	p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: 64, LastLogitsOnly: true}, passes.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range p.Dispatches {
		if d.Attrs.Int(gpu.AttrPrefillTiled) != 0 || d.Op == "attention_partial" {
			t.Fatalf("cpu plan dispatch %d (%s) carries GPU attention choices", d.Index, d.Op)
		}
	}
}

// planKernels is a plan's dispatches as op, kernel, grid and group size, in order.
func planKernels(p *plan.Plan) string {
	s := ""
	for _, d := range p.Dispatches {
		s += fmt.Sprintf("%s %s %v %d\n", d.Op, d.Kernel, d.Grid, d.Block)
	}
	return s
}
