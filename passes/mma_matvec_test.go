package passes_test

import (
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
)

// On the 35B-A3B's decode plan, mma-matvec gives every q4 matrix-vector dispatch whose
// kernel has a tensor-core twin that twin (the projections of all 40 layers, the routed
// experts' gate/up with the shared expert's, the lm_head) and leaves the rest alone;
// imma-matvec gives all of them the twin's integer form, and staged-matvec, where
// imma-matvec is off, its staged form (every K of the model fits a group's memory); off,
// nothing runs a twin (or another form); Metal, without tensor cores, never gets one.
func TestMMAMatvecMarksDecodeMatvecs(t *testing.T) {
	g := fullModelGraph(t)
	twins, integer, staged := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, twin := range kernels.MMAMatvecTwin {
		for _, form := range []string{twin, kernels.IMMAMatvecTwin[twin], kernels.StagedMatvecTwin[twin]} {
			twins[form] = true
		}
		integer[kernels.IMMAMatvecTwin[twin]] = true
		staged[kernels.StagedMatvecTwin[twin]] = true
	}
	// The staged twin of matvec_fused_q4 with a prologue norm (norm-matvec: the layers'
	// input projections and the lm_head, with staged-matvec on).
	twins[kernels.KernelMatvecFusedNormStagedQ4], staged[kernels.KernelMatvecFusedNormStagedQ4] = true, true
	for _, c := range []struct {
		backend            string
		on, imma, stage    bool
		wantTwins, wantInt int
		wantStaged         int
	}{
		{"cuda", true, true, true, 121, 121, 0}, {"cuda", true, false, true, 121, 0, 121}, {"cuda", true, false, false, 121, 0, 0},
		{"cuda", false, true, true, 0, 0, 0}, {"cuda", false, false, false, 0, 0, 0}, {"metal", true, true, true, 0, 0, 0},
	} {
		decode, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1, Backend: c.backend},
			passes.Config{Off: map[string]bool{"mma-matvec": !c.on, "imma-matvec": !c.imma, "staged-matvec": !c.stage}})
		if err != nil {
			t.Fatal(err)
		}
		marked, ints, stages, simt := 0, 0, 0, 0
		for _, d := range decode.Dispatches {
			isTwin, isInt, isStaged := twins[d.Kernel], integer[d.Kernel], staged[d.Kernel]
			if isTwin != d.Attrs.Bool(gpu.AttrMMAMatvec) || isInt != d.Attrs.Bool(gpu.AttrIMMAMatvec) || isStaged != d.Attrs.Bool(gpu.AttrStagedMatvec) {
				t.Errorf("%s on=%v imma=%v staged=%v: %s %s runs %s, marked %v, %v, %v", c.backend, c.on, c.imma, c.stage, d.Op, d.Label, d.Kernel,
					d.Attrs.Bool(gpu.AttrMMAMatvec), d.Attrs.Bool(gpu.AttrIMMAMatvec), d.Attrs.Bool(gpu.AttrStagedMatvec))
			}
			if isTwin {
				marked++
			}
			if isInt {
				ints++
			}
			if isStaged {
				stages++
			}
			if _, ok := kernels.MMAMatvecTwin[d.Kernel]; ok {
				simt++
			}
		}
		// 30 GDN input projections + 10 attention q/k/v, 40 output projections, 40 routed +
		// shared gate/up, 1 lm_head (the routed and shared down projections keep
		// expert_matvec_combine_shared_q4, which was faster than a twin: cuda/README.md).
		if marked != c.wantTwins || ints != c.wantInt || stages != c.wantStaged {
			t.Errorf("%s on=%v imma=%v staged=%v: %d dispatches on tensor-core twins, %d integer, %d staged, want %d, %d, %d (%d left on twinned SIMT kernels)",
				c.backend, c.on, c.imma, c.stage, marked, ints, stages, c.wantTwins, c.wantInt, c.wantStaged, simt)
		}
	}
}

// On the 35B-A3B's prefill plans, expert-split-k gives the routed experts' matmuls the
// split-k tile exactly when their experts receive at most 16 rows on average: chunks of
// 512 tokens (T·k/E = 16) but not 4,096 (128); off, or on Metal, none.
func TestExpertSplitKMarksSmallExpertTiles(t *testing.T) {
	g := fullModelGraph(t)
	for _, c := range []struct {
		backend string
		tokens  int
		on      bool
		want    int
	}{{"cuda", 512, true, 120}, {"cuda", 512, false, 0}, {"cuda", 4096, true, 0}, {"metal", 512, true, 0}} {
		p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: c.tokens, Backend: c.backend},
			passes.Config{Off: map[string]bool{"expert-split-k": !c.on}})
		if err != nil {
			t.Fatal(err)
		}
		marked := 0
		for _, d := range p.Dispatches {
			split := d.Kernel == kernels.KernelExpertMMASplitK || d.Kernel == kernels.KernelExpertMMASplitKQ4
			if split != d.Attrs.Bool(gpu.AttrExpertSplitK) {
				t.Errorf("%s T=%d: %s %s runs %s, marked %v", c.backend, c.tokens, d.Op, d.Label, d.Kernel, d.Attrs.Bool(gpu.AttrExpertSplitK))
			}
			if split {
				marked++
			}
		}
		if marked != c.want {
			t.Errorf("%s T=%d on=%v: %d routed-expert dispatches on expert_mma_splitk, want %d", c.backend, c.tokens, c.on, marked, c.want)
		}
	}
}

// On the 35B-A3B's prefill plans, mma-wide-rows gives the wide tiles to the dense matmuls
// that run on matmul_mma (not the split-k ones) and to the routed experts' matmuls in
// tiles of 32 routed rows: in a 1,024-token chunk (T·k/E = 32) the 150 of matmul_mma_q4
// (the GDN's qkv, z and output projections, attention's q and output projections, the
// shared experts' down projections) and the 120 routed gate, up and down projections;
// at 512 tokens (busy-expert-tiles and split-k-only-idle off: their own tests have them
// on) the experts' tiles hold 16 rows and stay, and of the dense matmuls only
// the 70 of 8,192 and 4,096 rows (GDN qkv and z, attention's q) run on matmul_mma (the
// rest fill too few 64 x 64 tiles and are split-k's); off, or on Metal, none.
func TestMMAWideRowsMarksDenseAndTile32(t *testing.T) {
	g := fullModelGraph(t)
	for _, c := range []struct {
		backend           string
		tokens            int
		on                bool
		wantDense, wantEx int
	}{{"cuda", 1024, true, 150, 120}, {"cuda", 1024, false, 0, 0}, {"cuda", 512, true, 70, 0}, {"metal", 1024, true, 0, 0}} {
		p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: c.tokens, Backend: c.backend},
			passes.Config{Off: map[string]bool{"mma-wide-rows": !c.on, "busy-expert-tiles": true, "split-k-only-idle": true}})
		if err != nil {
			t.Fatal(err)
		}
		dense, experts := 0, 0
		for _, d := range p.Dispatches {
			switch d.Kernel {
			case kernels.KernelMatmulMMAWide, kernels.KernelMatmulMMAWideQ4:
				dense++
			case kernels.KernelExpertMMA32W, kernels.KernelExpertMMA32WQ4:
				experts++
			default:
				if d.Attrs.Bool(gpu.AttrMMAWideRows) {
					t.Errorf("%s T=%d: %s %s marked %s runs %s", c.backend, c.tokens, d.Op, d.Label, gpu.AttrMMAWideRows, d.Kernel)
				}
				continue
			}
			if !d.Attrs.Bool(gpu.AttrMMAWideRows) {
				t.Errorf("%s T=%d: %s %s runs %s unmarked", c.backend, c.tokens, d.Op, d.Label, d.Kernel)
			}
		}
		if dense != c.wantDense || experts != c.wantEx {
			t.Errorf("%s T=%d on=%v: %d dense and %d routed-expert dispatches on the wide tiles, want %d and %d",
				c.backend, c.tokens, c.on, dense, experts, c.wantDense, c.wantEx)
		}
	}
}

// fullModelGraph is the 35B-A3B's graph in its MLX 4-bit layout (the plans' shapes, no
// weights).
func fullModelGraph(t *testing.T) *graph.Graph {
	t.Helper()
	cfg := qwen35moe.Default()
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{WeightType: qwen35moe.MLXWeightType(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// On the 35B-A3B's prefill plans, busy-expert-tiles gives the 120 routed gate, up and
// down projections of a 512-token chunk (16 rows an expert on average, 43% of experts
// over 16 were the routing uniform) the wide 32-row tile, and leaves them their 16-row
// tile at 256 tokens (8 an expert, 0.4% over 16), where it measured slower; 1,024-token
// chunks have the 32-row tile from expert-tiles already. Without mma-wide-rows, with
// expert-split-k taking the 16-row tiles, off, or on Metal, nothing grows.
func TestBusyExpertTilesGrowTheTile(t *testing.T) {
	g := fullModelGraph(t)
	for _, c := range []struct {
		name             string
		backend          string
		tokens           int
		off              map[string]bool
		wantWide, want16 int
	}{
		{"512", "cuda", 512, nil, 120, 0},
		{"512/off", "cuda", 512, map[string]bool{"busy-expert-tiles": true}, 0, 120},
		{"256", "cuda", 256, nil, 0, 120},
		{"1024", "cuda", 1024, nil, 120, 0},
		{"512/narrow", "cuda", 512, map[string]bool{"mma-wide-rows": true}, 0, 120},
		{"512/split-k", "cuda", 512, map[string]bool{"expert-split-k": false}, 0, 0},
		{"512/metal", "metal", 512, nil, 0, 0},
	} {
		k := prefillKernels(t, g, c.backend, c.tokens, c.off)
		wide := k[kernels.KernelExpertMMA32W] + k[kernels.KernelExpertMMA32WQ4]
		tile16 := k[kernels.KernelExpertMMA16] + k[kernels.KernelExpertMMA16Q4]
		if wide != c.wantWide || tile16 != c.want16 {
			t.Errorf("%s: %d routed-expert dispatches on the wide tile and %d on the 16-row tile, want %d and %d",
				c.name, wide, tile16, c.wantWide, c.want16)
		}
	}
}

// On the 35B-A3B's prefill plans, split-k-only-idle takes matmul_mma_splitk back from the
// 512-token chunk's matmuls of 256 tiles (30 GDN and 10 attention output projections, 40
// shared experts' down projections: 2,048 rows x 512 tokens), which run on the wide tile
// instead, and leaves it the rest (the shared experts' gate and up, k and v, the GDN's a
// and b, the routers); in a 256-token chunk the GDN's z projections (4,096 rows: 256
// tiles) move and its output projections (128 tiles) keep the split. Without
// mma-wide-rows, off, or on Metal, nothing changes.
func TestSplitKOnlyIdleKeepsTheSplitForIdleTiles(t *testing.T) {
	g := fullModelGraph(t)
	count := func(backend string, tokens int, off map[string]bool) (split, wide int) {
		k := prefillKernels(t, g, backend, tokens, off)
		return k[kernels.KernelMatmulMMASplitK] + k[kernels.KernelMatmulMMASplitKQ4], k[kernels.KernelMatmulMMAWide] + k[kernels.KernelMatmulMMAWideQ4]
	}
	for _, c := range []struct {
		name    string
		backend string
		tokens  int
		off     map[string]bool
		moved   int // split-k dispatches that became wide ones, against the pass off
	}{
		{"512", "cuda", 512, nil, 80},
		{"256", "cuda", 256, nil, 30},
		{"1024", "cuda", 1024, nil, 0},
		{"512/narrow", "cuda", 512, map[string]bool{"mma-wide-rows": true}, 0},
		{"512/metal", "metal", 512, nil, 0},
	} {
		off := map[string]bool{"split-k-only-idle": true}
		for k, v := range c.off {
			off[k] = v
		}
		split, wide := count(c.backend, c.tokens, c.off)
		split0, wide0 := count(c.backend, c.tokens, off)
		if split0-split != c.moved || wide-wide0 != c.moved {
			t.Errorf("%s: split-k %d -> %d and wide %d -> %d dispatches with the pass on, want %d moved from one to the other",
				c.name, split0, split, wide0, wide, c.moved)
		}
		if c.name == "512" && split == 0 {
			t.Errorf("512: no matmul kept the split; the shared experts' gate and up (64 tiles) should")
		}
	}
}

// prefillKernels compiles g's prefill plan of tokens tokens for backend, the passes named
// in off switched off (or, for a pass off by default, on where the value is false), and
// counts its dispatches by kernel.
func prefillKernels(t *testing.T, g *graph.Graph, backend string, tokens int, off map[string]bool) map[string]int {
	t.Helper()
	p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: tokens, Backend: backend}, passes.Config{Off: off})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, d := range p.Dispatches {
		counts[d.Kernel]++
	}
	return counts
}
