//go:build linux

package cuda

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/internal/fixtures"
)

// handoffModels opens the golden tiny checkpoint twice: decode sampled on the device with
// the token handoff (running ahead, or in order), and on the host from each step's
// logits (the off switch).
func handoffModels(t *testing.T, graphs bool, inOrder ...bool) (on, off *exec.Model) {
	t.Helper()
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	open := func(handoff bool) *exec.Model {
		m, err := exec.Open(fixtures.Golden("mlx-q4"), exec.Options{Backend: "cuda", Chunk: 16, Graphs: graphs, TokenHandoff: handoff,
			HandoffInOrder: len(inOrder) > 0 && inOrder[0]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	return open(true), open(false)
}

var handoffPrompt = []int32{9, 41, 7, 300, 12, 5, 77, 500, 3, 18, 64, 2}

type generation struct {
	res    exec.GenerateResult
	len    int
	logits []float32
	steps  int64 // the session's decode steps, discarded ones included
}

func generate(t *testing.T, s *exec.Session, prompt []int32, o exec.GenerateOptions) generation {
	t.Helper()
	res, err := s.Generate(t.Context(), prompt, o)
	if err != nil && !errors.Is(err, errTestStop) {
		t.Fatal(err)
	}
	return generation{res: res, len: s.Len(), logits: slices.Clone(s.Logits()), steps: s.DecodeSteps()}
}

var errTestStop = errors.New("test stop")

func newSession(t *testing.T, m *exec.Model) *exec.Session {
	t.Helper()
	s, err := m.NewSession(256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sameGeneration: the same tokens and finish, and the session left at the same length
// with the same logits (bit for bit: both paths run the same plan and kernels).
func sameGeneration(t *testing.T, what string, on, off generation) {
	t.Helper()
	if !slices.Equal(on.res.Tokens, off.res.Tokens) || on.res.FinishReason != off.res.FinishReason {
		t.Fatalf("%s: handoff %v (%s), host %v (%s)", what, on.res.Tokens, on.res.FinishReason, off.res.Tokens, off.res.FinishReason)
	}
	if on.len != off.len || on.res.DecodeSteps != off.res.DecodeSteps {
		t.Fatalf("%s: handoff leaves Len %d after %d steps, host %d after %d", what, on.len, on.res.DecodeSteps, off.len, off.res.DecodeSteps)
	}
	if !slices.Equal(on.logits, off.logits) {
		t.Fatalf("%s: the session's logits differ after the generation", what)
	}
}

// Greedy decoding with the token handoff gives the host loop's tokens on the golden tiny
// checkpoint, with graphs and with launches one by one, running ahead and in order.
func TestHandoffGreedyMatchesHostGreedy(t *testing.T) {
	for _, c := range []struct{ graphs, inOrder bool }{{true, false}, {false, false}, {true, true}} {
		on, off := handoffModels(t, c.graphs, c.inOrder)
		o := exec.GenerateOptions{MaxTokens: 20}
		a := generate(t, newSession(t, on), handoffPrompt, o)
		b := generate(t, newSession(t, off), handoffPrompt, o)
		sameGeneration(t, "greedy", a, b)
		if a.res.FinishReason != "length" || len(a.res.Tokens) != 20 {
			t.Fatalf("greedy: %d tokens, finish %s", len(a.res.Tokens), a.res.FinishReason)
		}
		if a.steps != int64(a.res.DecodeSteps) {
			t.Errorf("a generation ending by length ran %d steps for %d decode steps: a step ran ahead past the last token", a.steps, a.res.DecodeSteps)
		}
	}
}

// Seeded sampling with every knob gives the same tokens on the device and on the host,
// and again on a second run.
func TestHandoffSeededSamplingIsReproducibleAndMatchesHost(t *testing.T) {
	on, off := handoffModels(t, true)
	seed := int64(20261201)
	for _, p := range []exec.SamplingParams{
		{Temperature: 0.9, Seed: &seed},
		{Temperature: 1.1, TopK: 40, TopP: 0.9, MinP: 0.02, PresencePenalty: 0.4, FrequencyPenalty: 0.3, Seed: &seed},
	} {
		o := exec.GenerateOptions{MaxTokens: 16, Sampling: p}
		a := generate(t, newSession(t, on), handoffPrompt, o)
		again := generate(t, newSession(t, on), handoffPrompt, o)
		b := generate(t, newSession(t, off), handoffPrompt, o)
		sameGeneration(t, "seeded, handoff run twice", a, again)
		sameGeneration(t, "seeded, handoff vs host", a, b)
		greedy := generate(t, newSession(t, off), handoffPrompt, exec.GenerateOptions{MaxTokens: 16})
		if slices.Equal(a.res.Tokens, greedy.res.Tokens) {
			t.Errorf("%+v sampled the greedy tokens: the test shows nothing about sampling", p)
		}
	}
}

// A stop found one step late: the step that ran ahead is discarded, so the session is
// exactly what the host loop leaves (length, logits), and continuing it gives the tokens
// a session that never ran ahead gives. Both kinds of stop: a stop token, and OnToken
// asking to stop (a stop string), or failing. In order, nothing runs ahead.
func TestHandoffStopOneStepLateLeavesTheSessionExact(t *testing.T) {
	on, off := handoffModels(t, true)
	inOrder, _ := handoffModels(t, true, true)
	ref := generate(t, newSession(t, off), handoffPrompt, exec.GenerateOptions{MaxTokens: 12})
	stopAt := 5
	stops := []struct {
		name string
		o    func() exec.GenerateOptions
	}{
		{"stop token", func() exec.GenerateOptions {
			return exec.GenerateOptions{MaxTokens: 12, StopTokens: []int32{ref.res.Tokens[stopAt]}}
		}},
		{"OnToken stop", func() exec.GenerateOptions {
			n := 0
			return exec.GenerateOptions{MaxTokens: 12, OnToken: func(int32) error {
				if n++; n == stopAt+1 {
					return exec.ErrStop
				}
				return nil
			}}
		}},
		{"OnToken error", func() exec.GenerateOptions {
			n := 0
			return exec.GenerateOptions{MaxTokens: 12, OnToken: func(int32) error {
				if n++; n == stopAt+1 {
					return errTestStop
				}
				return nil
			}}
		}},
	}
	for _, st := range stops {
		t.Run(st.name, func(t *testing.T) {
			if slices.Index(ref.res.Tokens, ref.res.Tokens[stopAt]) != stopAt {
				t.Skip("the stop token appears earlier in the greedy continuation")
			}
			sOn, sOff := newSession(t, on), newSession(t, off)
			a := generate(t, sOn, handoffPrompt, st.o())
			b := generate(t, sOff, handoffPrompt, st.o())
			sameGeneration(t, "up to the stop", a, b)
			if len(a.res.Tokens) != stopAt+1 {
				t.Fatalf("stopped after %d tokens, want %d", len(a.res.Tokens), stopAt+1)
			}
			if a.steps != int64(a.res.DecodeSteps)+1 {
				t.Fatalf("the handoff ran %d steps for %d decode steps; want one ahead (discarded)", a.steps, a.res.DecodeSteps)
			}
			// Continue both sessions: a new user turn, then greedy decoding.
			more := []int32{400, 8, 21}
			ca := generate(t, sOn, more, exec.GenerateOptions{MaxTokens: 8})
			cb := generate(t, sOff, more, exec.GenerateOptions{MaxTokens: 8})
			sameGeneration(t, "continued after the stop", ca, cb)
		})
	}
	t.Run("stop token in order", func(t *testing.T) {
		s := newSession(t, inOrder)
		a := generate(t, s, handoffPrompt, exec.GenerateOptions{MaxTokens: 12, StopTokens: []int32{ref.res.Tokens[stopAt]}})
		if !slices.Equal(a.res.Tokens, ref.res.Tokens[:stopAt+1]) || a.steps != int64(a.res.DecodeSteps) {
			t.Fatalf("in order: %v after %d steps (%d decode steps), want %v and no step ahead", a.res.Tokens, a.steps, a.res.DecodeSteps, ref.res.Tokens[:stopAt+1])
		}
	})
}

// Bad parameters are refused with an error naming them, before anything runs.
func TestHandoffRefusesNonFiniteParameters(t *testing.T) {
	on, _ := handoffModels(t, true)
	s := newSession(t, on)
	_, err := s.Generate(context.Background(), handoffPrompt, exec.GenerateOptions{MaxTokens: 4, Sampling: exec.SamplingParams{Temperature: 1, TopP: nan()}})
	if err == nil || !strings.Contains(err.Error(), "top-p") {
		t.Fatalf("a NaN top-p: error %v, want one naming top-p", err)
	}
}

func nan() float64 { var z float64; return z / z }
