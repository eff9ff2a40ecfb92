package grid

import (
	"context"
	"math"
	"slices"
	"testing"

	_ "pistil/cpu" // the reference backend
	"pistil/models/synth"
)

// CPUTolerance bounds the CPU backend against itself (whole vs chunked vs decode): the
// same kernels in another accumulation order, so float32 rounding only.
var CPUTolerance = Tolerance{Abs: 1e-4, Rel: 1e-5}

// Every shape is a valid checkpoint shape, named once per layout.
func TestShapesValid(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Shapes {
		if err := s.Dims.Validate(); err != nil {
			t.Errorf("%s: %v", s.ID(), err)
		}
		if _, err := synth.ParseLayout(string(s.Layout)); err != nil {
			t.Errorf("%s: %v", s.ID(), err)
		}
		if seen[s.ID()] {
			t.Errorf("%s appears twice", s.ID())
		}
		seen[s.ID()] = true
	}
}

// The grid covers what the issue asks for; a later edit of the table that drops a case
// fails here instead of silently testing less.
func TestCoverage(t *testing.T) {
	has := func(what string, want []int, of func(synth.Dims) []int) {
		t.Helper()
		got := map[int]bool{}
		for _, s := range Shapes {
			for _, v := range of(s.Dims) {
				got[v] = true
			}
		}
		for _, w := range want {
			if !got[w] {
				t.Errorf("no shape has %s %d", what, w)
			}
		}
	}
	one := func(f func(d synth.Dims) int) func(synth.Dims) []int {
		return func(d synth.Dims) []int { return []int{f(d)} }
	}
	has("head dim", []int{64, 128, 256}, one(func(d synth.Dims) int { return d.HeadDim }))
	has("query heads per KV head", []int{1, 2, 4, 8}, one(func(d synth.Dims) int { return d.Heads / d.KVHeads }))
	has("KV heads", []int{1, 2}, one(func(d synth.Dims) int { return d.KVHeads }))
	has("DeltaNet value heads per key head", []int{1, 2}, func(d synth.Dims) []int {
		if d.AttentionInterval == 1 {
			return nil // no DeltaNet layer
		}
		return []int{d.LinearValueHeads / d.LinearKeyHeads}
	})
	has("top-k", []int{1, 2, 4, 8}, one(func(d synth.Dims) int { return d.TopK }))
	has("experts", []int{4, 8, 64}, one(func(d synth.Dims) int { return d.Experts }))
	has("full-attention interval", []int{1, 2, 4}, one(func(d synth.Dims) int { return d.AttentionInterval }))
	has("hidden", []int{64, 2048}, one(func(d synth.Dims) int { return d.Hidden }))
	var keyBigger, valueBigger bool
	layouts := map[synth.Layout]bool{}
	for _, s := range Shapes {
		if s.Dims.AttentionInterval > 1 {
			keyBigger = keyBigger || s.Dims.LinearKeyDim > s.Dims.LinearValueDim
			valueBigger = valueBigger || s.Dims.LinearValueDim > s.Dims.LinearKeyDim
		}
		layouts[s.Layout] = true
	}
	if !keyBigger || !valueBigger {
		t.Errorf("DeltaNet key dim > value dim: %v, value dim > key dim: %v; want both", keyBigger, valueBigger)
	}
	for _, l := range synth.Layouts {
		if !layouts[l] {
			t.Errorf("no shape in layout %s", l)
		}
	}
	if !slices.ContainsFunc(Shapes, func(s Shape) bool { return s.Dims == issue10 && s.Layout == synth.MLXQ4 }) {
		t.Error("the shape of issue 10 in MLX 4-bit is not in the grid")
	}
	if !slices.ContainsFunc(Shapes, func(s Shape) bool { return s.CI }) {
		t.Error("no shape runs in CI")
	}
}

// compare fails a path for each way it can be wrong, and passes one within tolerance.
func TestCompareCatchesErrors(t *testing.T) {
	want := [][]float32{{1, 5, -2, 0.5}, {3, -1, 0, 2}}
	clone := func() [][]float32 {
		out := make([][]float32, len(want))
		for i := range want {
			out[i] = slices.Clone(want[i])
		}
		return out
	}
	tol := Tolerance{Abs: 1e-3, Rel: 1e-3} // bounds 0.006 and 0.004
	near := clone()
	near[0][2] += 0.005
	near[1][3] -= 0.003
	if r := compare(near, want, tol); !r.Pass() {
		t.Errorf("errors inside the bounds failed: %v", r)
	}
	far := clone()
	far[1][0] += 0.01
	if r := compare(far, want, tol); r.Pass() || r.Position != 1 || r.Over != 1 || r.First != 1 {
		t.Errorf("an error of 0.01 against a bound of 0.004 passed (or at the wrong position): %v", r)
	}
	nan := clone()
	nan[0][0] = float32(math.NaN())
	if r := compare(nan, want, tol); r.Pass() || r.NaN != 1 {
		t.Errorf("a NaN logit passed: %v", r)
	}
	flip := clone()
	flip[0][1], flip[0][0] = 1, 5 // top-1 moves across a margin of 4
	if r := compare(flip, want, tol); r.Pass() || r.Top1 != 0.5 {
		t.Errorf("a top-1 flip passed, or was not counted: %v", r)
	}
	tie := [][]float32{{1, 1.0005}}
	if r := compare([][]float32{{1.0005, 1}}, tie, tol); !r.Pass() || r.Top1 != 0 {
		t.Errorf("a top-1 swap inside the bound (a near tie) failed, or was not counted: %v", r)
	}
}

// The CPU backend agrees with itself on every path over the CI shapes: whole vs chunks
// of 1, 7 and 64 vs decode. This runs the harness end to end where there is no GPU.
func TestCPUSelfConsistency(t *testing.T) {
	dir := t.TempDir()
	ran := 0
	for _, s := range Shapes {
		if !s.CI {
			continue
		}
		ran++
		t.Run(s.ID(), func(t *testing.T) {
			ck, err := Write(s, dir, 1)
			if err != nil {
				t.Fatal(err)
			}
			results, err := Run(context.Background(), s, ck, Options{Reference: "cpu", Backend: "cpu", Tolerance: CPUTolerance, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != len(Paths) {
				t.Fatalf("%d results for %d paths", len(results), len(Paths))
			}
			for _, r := range results {
				t.Log(r)
				if !r.Pass() {
					t.Error(r)
				}
			}
		})
	}
	if ran == 0 {
		t.Fatal("no CI shape")
	}
}

// Two different checkpoints of one shape do not pass for each other: the harness sees a
// wrong model, not only a wrong path.
func TestOtherWeightsFail(t *testing.T) {
	s := Shapes[0]
	dir := t.TempDir()
	a, err := Write(s, dir+"/a", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Write(s, dir+"/b", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := Options{Reference: "cpu", Backend: "cpu", Tolerance: CPUTolerance, Seed: 1}
	prompt := Prompt(s.Dims.Vocab, 1)
	want, err := logits(ctx, a, "cpu", Paths[0], prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := logits(ctx, b, "cpu", Paths[0], prompt, o)
	if err != nil {
		t.Fatal(err)
	}
	if r := compare(got, want, CPUTolerance); r.Pass() {
		t.Errorf("seed 2's logits passed for seed 1's: %v", r)
	}
}
