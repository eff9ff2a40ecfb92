package gpu

import (
	"math"
	"testing"

	"pistil/ops"
	"pistil/ops/kernels"
)

// Every op of the table is a kernel, a fused op with a kernel for some operands, a fused
// op the compiler expands, or a source or view with a stated reason.
func TestEveryOpIsCovered(t *testing.T) {
	for _, name := range ops.Default.Names() {
		info, _ := ops.Default.Info(name)
		_, single := lowerings[name]
		_, fused := fusedKernels[name]
		reason, none := noKernel[name]
		expands := info.Expand != nil || info.ExpandTuple != nil
		switch {
		case single && (fused || none):
			t.Errorf("op %s is in more than one table", name)
		case fused && !expands:
			t.Errorf("fused op %s has a kernel for some operands but no expansion for the others", name)
		case !single && !fused && !none && !expands:
			t.Errorf("op %s has no kernel, no expansion and no reason", name)
		case none && reason == "":
			t.Errorf("op %s has no kernel and no reason", name)
		}
	}
	for name := range lowerings {
		if _, ok := ops.Default.Info(name); !ok {
			t.Errorf("lowering for %s, which is not an op of the table", name)
		}
	}
	for name := range fusedKernels {
		if _, ok := ops.Default.Info(name); !ok {
			t.Errorf("fused lowering for %s, which is not an op of the table", name)
		}
	}
}

// broadcast strides follow the elementwise ops' rule (b a suffix of a, or dims of 1).
func TestBroadcastStrides(t *testing.T) {
	shape, strides, err := broadcast([]int{2, 3, 4}, []int{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if shape != [4]int32{1, 2, 3, 4} || strides != [4]int32{0, 0, 1, 0} {
		t.Errorf("shape %v strides %v", shape, strides)
	}
	_, strides, _ = broadcast([]int{5, 4}, []int{4})
	if strides != [4]int32{0, 0, 0, 1} {
		t.Errorf("suffix strides %v", strides)
	}
	if _, _, err := broadcast([]int{5, 4}, []int{3}); err == nil {
		t.Error("b [3] was accepted against a [5,4]")
	}
}

// Attention splits its keys only when a step has fewer groups than fill the GPU, never
// beyond the kernel's limit, and never where the split kernel does not apply.
func TestAttentionSplits(t *testing.T) {
	for _, c := range []struct{ T, NH, KVH, D, want int }{
		{1, 16, 2, 256, 64},  // decode of the 35B-A3B: 2 groups, split 64 ways (the most)
		{1, 4, 2, 128, 64},   // 2 groups
		{8, 16, 2, 256, 17},  // 16 groups: ceil(264/16)
		{132, 16, 2, 256, 1}, // 264 groups fill the GPU
		{1, 32, 2, 256, 1},   // 16 query heads per kv head: the one-head-per-group kernel
		{1, 16, 2, 80, 1},    // head dim not a multiple of 32
	} {
		if got := CUDA.AttentionSplits(c.T, c.NH, c.KVH, c.D); got != c.want || got > kernels.AttnMaxSplits {
			t.Errorf("T %d NH %d KVH %d D %d: %d splits, want %d", c.T, c.NH, c.KVH, c.D, got, c.want)
		}
	}
}

// Each GPU target's sizes that the kernels also see as tuning macros agree with that
// backend's kernels.Tuning: a lowering's grid of combine groups must cover the rows the
// compiled kernel gives a group.
func TestTargetsAgreeWithKernelTuning(t *testing.T) {
	for _, c := range []struct {
		target *Target
		tuning kernels.Tuning
	}{{CUDA, kernels.CUDA}, {Metal, kernels.Metal}} {
		if c.target.CombineRows != int(c.tuning.CombineRows) || c.target.CombineRows <= 0 {
			t.Errorf("%s: CombineRows %d, the kernels' MVC_ROWS %d", c.target.Name, c.target.CombineRows, c.tuning.CombineRows)
		}
	}
}

// ExpertRowsOverTile is the tail of a Poisson distribution with mean slots/E: the values
// of P(X > 16) below were computed independently (1 - Σ e^-m m^k / k! for k <= 16, in
// Python). A cut at 10% therefore falls just under 12 rows an expert (11.98).
func TestExpertRowsOverTile(t *testing.T) {
	for _, c := range []struct {
		slots, experts, tile int
		want                 float64
	}{
		{2048, 256, 16, 0.0037180212812841784}, // 256 tokens x 8 of 256: 8 an expert
		{3072, 256, 16, 0.10129100743983788},   // 12
		{3136, 256, 16, 0.11542940545520741},   // 12.25
		{4096, 256, 16, 0.43403757699012335},   // 512 tokens: 16
		{8192, 256, 16, 0.9986083327129703},    // 1,024 tokens: 32
		{0, 256, 16, 0},
		{100000, 1, 16, 1}, // e^-mean underflows to zero: every expert is over
	} {
		got := ExpertRowsOverTile(c.slots, c.experts, c.tile)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("ExpertRowsOverTile(%d, %d, %d) = %.12f, want %.12f", c.slots, c.experts, c.tile, got, c.want)
		}
	}
}
