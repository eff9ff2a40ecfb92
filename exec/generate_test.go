package exec_test

import (
	"context"
	"slices"
	"testing"

	"pistil/exec"
)

// forcing is a TokenSampler that wraps another (as a constrained decoder does) and
// replaces its choice.
type forcing struct {
	inner   exec.TokenSampler
	force   int32
	calls   int
	history [][]int32
}

func (f *forcing) Sample(logits []float32, history []int32) int32 {
	f.calls++
	f.history = append(f.history, slices.Clone(history))
	f.inner.Sample(logits, history)
	return f.force
}

// The sampler is a seam: a wrapping sampler decides every token the loop generates, and
// sees the tokens generated so far; OnLogits reports the logits each token came from.
func TestGenerateSamplerSeamAndLogits(t *testing.T) {
	m, _ := openTiny(t, "mlx-q4", exec.Options{})
	ctx := context.Background()
	s, err := m.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	f := &forcing{inner: exec.NewSampler(exec.SamplingParams{}), force: 7}
	res, err := s.Generate(ctx, []int32{1, 2, 3}, exec.GenerateOptions{MaxTokens: 4, Sampler: f})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, []int32{7, 7, 7, 7}) || f.calls != 4 || res.DecodeSteps != 3 {
		t.Fatalf("tokens %v, %d sampler calls, %d decode steps", res.Tokens, f.calls, res.DecodeSteps)
	}
	if !slices.Equal(f.history[3], []int32{7, 7, 7}) {
		t.Fatalf("the sampler saw history %v before the 4th token", f.history[3])
	}

	s.Reset()
	var reported []int32
	res, err = s.Generate(ctx, []int32{1, 2, 3}, exec.GenerateOptions{MaxTokens: 5,
		OnLogits: func(id int32, logits []float32) {
			if len(logits) != m.Config().VocabSize {
				t.Fatalf("%d logits, vocabulary %d", len(logits), m.Config().VocabSize)
			}
			reported = append(reported, int32(argmaxOf(logits)))
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(reported, res.Tokens) {
		t.Fatalf("greedy tokens %v, argmax of the reported logits %v", res.Tokens, reported)
	}
}

// Cuts end prefill pieces: a prompt prefilled with a cut at 5 is, bit for bit, the same
// as prefilling its first 5 tokens and then the rest. Snapshots land at the multiples of
// SnapshotEvery, at SnapshotAt and at the end.
func TestPrefillCutsAndSnapshotPositions(t *testing.T) {
	m, _ := openTiny(t, "mlx-q4", exec.Options{Chunk: 8})
	ctx := context.Background()
	prompt := []int32{5, 9, 2, 7, 1, 8, 3, 6, 4, 10, 11, 12, 13}
	a, _ := m.NewSession(32)
	var snaps []*exec.Snapshot
	err := a.Prefill(ctx, prompt, exec.PrefillOptions{Cuts: []int{5}, SnapshotEvery: 4, SnapshotAt: []int{10},
		OnSnapshot: func(s *exec.Snapshot) { snaps = append(snaps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := lens(snaps); !slices.Equal(got, []int{4, 8, 10, 12, 13}) {
		t.Fatalf("snapshots at %v", got)
	}
	b, _ := m.NewSession(32)
	for _, piece := range [][2]int{{0, 4}, {4, 5}, {5, 8}, {8, 10}, {10, 12}, {12, 13}} {
		if err := b.Prefill(ctx, prompt[piece[0]:piece[1]], exec.PrefillOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(a.Logits(), b.Logits()) {
		t.Fatalf("cut prefill differs from the same pieces run one by one (max diff %g)", maxDiff(a.Logits(), b.Logits()))
	}
}

func argmaxOf(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
