package passes_test

import (
	"fmt"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops/kernels"
	"pistil/passes"
)

// On the 35B-A3B's shapes with a float32 KV cache (the engine's default) or a bf16 one,
// modelWithCache builds the 35B-A3B's graph (MLX 4-bit weights) with a KV cache of kv.
func modelWithCache(t *testing.T, kv graph.DType) *graph.Graph {
	t.Helper()
	cfg := qwen35moe.Default()
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{WeightType: qwen35moe.MLXWeightType(cfg), KVDType: kv})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// mma-attention puts every tiled prefill attention of the 10 attention layers on
// attention_prefill_mma on the CUDA target, split or whole (fa2-attention off: on, a bf16
// cache's runs on attention_prefill_fa2, TestFA2AttentionChoosesItsKernel), and off gives back
// attention_prefill; Metal (no tensor cores) keeps attention_prefill with the pass on;
// decode is the same plan either way (attention_gqa_mma: mma-decode-attention's).
func TestMMAAttentionChoosesTheTensorCoreKernel(t *testing.T) {
	f32, bf16 := modelWithCache(t, graph.F32), modelWithCache(t, graph.BF16)
	on := passes.Config{Off: map[string]bool{"mma-attention": false, "fa2-attention": true}}
	off := passes.Config{Off: map[string]bool{"mma-attention": true}}
	compile := func(g *graph.Graph, target string, T int, cfg passes.Config) map[string]int {
		t.Helper()
		return attentionKernels(t, compileStep(t, g, target, T, cfg), 16, 2)
	}
	for _, T := range []int{2, 64, 512, 1024} {
		t.Run(fmt.Sprintf("T=%d", T), func(t *testing.T) {
			if got := compile(f32, "cuda", T, on); got[kernels.KernelAttentionPrefillMMA] != 10 || len(got) != 1 {
				t.Errorf("cuda, f32 cache, on: attention kernels %v, want attention_prefill_mma in all 10 layers", got)
			}
			if got := compile(f32, "cuda", T, off); got[kernels.KernelAttentionPrefill] != 10 || len(got) != 1 {
				t.Errorf("cuda, f32 cache, off: attention kernels %v, want attention_prefill in all 10 layers", got)
			}
			if got := compile(bf16, "cuda", T, on); got[kernels.KernelAttentionPrefillMMA] != 10 || len(got) != 1 {
				t.Errorf("cuda, bf16 cache, on: attention kernels %v, want attention_prefill_mma in all 10 layers", got)
			}
			if got := compile(f32, "metal", T, on); got[kernels.KernelAttentionPrefill] != 10 || len(got) != 1 {
				t.Errorf("metal, on: attention kernels %v, want attention_prefill in all 10 layers", got)
			}
		})
	}
	if a, b := compile(f32, "cuda", 1, on), compile(f32, "cuda", 1, off); fmt.Sprint(a) != fmt.Sprint(b) || a[kernels.KernelAttentionGQAMMA] != 10 {
		t.Errorf("decode attention kernels %v on, %v off: want attention_gqa_mma in all 10 layers both ways", a, b)
	}
}

// fa2-attention (on by default) puts the 35B-A3B's tiled prefill attention over a bf16
// cache on attention_prefill_fa2 on the CUDA target, split or whole, and leaves a float32
// cache's on attention_prefill_mma; off gives back attention_prefill_mma, and with
// mma-attention off it marks nothing (attention_prefill); decode keeps attention_gqa_mma.
func TestFA2AttentionChoosesItsKernel(t *testing.T) {
	f32, bf16 := modelWithCache(t, graph.F32), modelWithCache(t, graph.BF16)
	on := passes.Config{}
	off := passes.Config{Off: map[string]bool{"fa2-attention": true}}
	noMMA := passes.Config{Off: map[string]bool{"mma-attention": true}}
	compile := func(g *graph.Graph, T int, cfg passes.Config) map[string]int {
		t.Helper()
		return attentionKernels(t, compileStep(t, g, "cuda", T, cfg), 16, 2)
	}
	for _, T := range []int{2, 64, 512, 1024} {
		t.Run(fmt.Sprintf("T=%d", T), func(t *testing.T) {
			if got := compile(bf16, T, on); got[kernels.KernelAttentionPrefillFA2] != 10 || len(got) != 1 {
				t.Errorf("bf16 cache, on: attention kernels %v, want attention_prefill_fa2 in all 10 layers", got)
			}
			if got := compile(bf16, T, off); got[kernels.KernelAttentionPrefillMMA] != 10 || len(got) != 1 {
				t.Errorf("bf16 cache, off: attention kernels %v, want attention_prefill_mma in all 10 layers", got)
			}
			if got := compile(f32, T, on); got[kernels.KernelAttentionPrefillMMA] != 10 || len(got) != 1 {
				t.Errorf("f32 cache, on: attention kernels %v, want attention_prefill_mma in all 10 layers", got)
			}
			if got := compile(bf16, T, noMMA); got[kernels.KernelAttentionPrefill] != 10 || len(got) != 1 {
				t.Errorf("bf16 cache, on without mma-attention: attention kernels %v, want attention_prefill in all 10 layers", got)
			}
		})
	}
	if got := compile(bf16, 1, on); got[kernels.KernelAttentionGQAMMA] != 10 || len(got) != 1 {
		t.Errorf("bf16 cache, decode, on: attention kernels %v, want attention_gqa_mma in all 10 layers", got)
	}
	// Its key split is its own: one group a multiprocessor and 16 tokens a group, so a
	// chunk of 1,024 tokens (128 groups) stays whole where a turn of 128 tokens (16
	// groups) is cut to fill the 132 multiprocessors.
	for _, tc := range []struct{ T, splits int }{{1024, 1}, {128, 9}, {512, 3}} {
		if got := gpu.CUDA.FA2AttentionSplits(tc.T, 16, 2, 256); got != tc.splits {
			t.Errorf("FA2AttentionSplits at %d tokens: %d, want %d", tc.T, got, tc.splits)
		}
		p := compileStep(t, bf16, "cuda", tc.T, on)
		n := 0
		for _, d := range p.Dispatches {
			if d.Kernel == kernels.KernelAttentionPrefillFA2 {
				n++
				if s := max(d.Attrs.Int("splits"), 1); s != tc.splits {
					t.Errorf("%d tokens: dispatch %d (%s) in %d key ranges, want %d", tc.T, d.Index, d.Op, s, tc.splits)
				}
			}
		}
		if n != 10 {
			t.Errorf("%d tokens: %d attention_prefill_fa2 dispatches, want 10", tc.T, n)
		}
	}
}

// mma-decode-attention puts decode's attention (split over key ranges) of the 10
// attention layers on attention_gqa_mma on the CUDA target with a float32 or a bf16
// cache, staged (attention_gqa_staged) with staged-decode-attention on too, and off gives
// back attention_gqa, staged-decode-attention or not; Metal (no tensor cores) keeps
// attention_gqa with both passes on; prefill keeps its tiled kernel either way.
func TestMMADecodeAttentionChoosesTheTensorCoreKernel(t *testing.T) {
	cfg := qwen35moe.Default()
	on := passes.Config{Off: map[string]bool{"mma-decode-attention": false}}
	staged := passes.Config{Off: map[string]bool{"mma-decode-attention": false, "staged-decode-attention": false}}
	off := passes.Config{Off: map[string]bool{"mma-decode-attention": true, "staged-decode-attention": false}}
	for _, kv := range []graph.DType{graph.F32, graph.BF16} {
		g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{WeightType: qwen35moe.MLXWeightType(cfg), KVDType: kv})
		if err != nil {
			t.Fatal(err)
		}
		compile := func(target string, T int, c passes.Config) map[string]int {
			t.Helper()
			return attentionKernels(t, compileStep(t, g, target, T, c), 16, 2)
		}
		if got := compile("cuda", 1, on); got[kernels.KernelAttentionGQAMMA] != 10 || len(got) != 1 {
			t.Errorf("%s cache, cuda decode, on: attention kernels %v, want attention_gqa_mma in all 10 layers", kv, got)
		}
		if got := compile("cuda", 1, staged); got[kernels.KernelAttentionGQAStaged] != 10 || len(got) != 1 {
			t.Errorf("%s cache, cuda decode, staged-decode-attention on: attention kernels %v, want attention_gqa_staged in all 10 layers", kv, got)
		}
		if got := compile("metal", 1, staged); got[kernels.KernelAttentionGQA] != 10 || len(got) != 1 {
			t.Errorf("%s cache, metal decode, staged-decode-attention on: attention kernels %v, want attention_gqa in all 10 layers", kv, got)
		}
		if got := compile("cuda", 1, off); got[kernels.KernelAttentionGQA] != 10 || len(got) != 1 {
			t.Errorf("%s cache, cuda decode, off: attention kernels %v, want attention_gqa in all 10 layers", kv, got)
		}
		if got := compile("metal", 1, on); got[kernels.KernelAttentionGQA] != 10 || len(got) != 1 {
			t.Errorf("%s cache, metal decode, on: attention kernels %v, want attention_gqa in all 10 layers", kv, got)
		}
		if got := compile("cuda", 512, on); got[kernels.KernelAttentionGQAMMA] != 0 || got[kernels.KernelAttentionGQA] != 0 {
			t.Errorf("%s cache, cuda prefill of 512, on: attention kernels %v, want the tiled prefill kernel", kv, got)
		}
	}
}
