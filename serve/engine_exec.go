package serve

import (
	"context"
	"fmt"

	"pistil/exec"
)

// WrapModel serves a model opened with pistil/exec. name, when not empty, replaces the
// served model id.
func WrapModel(m *exec.Model, name string) Model {
	if name == "" {
		name = m.Name()
	}
	return &execModel{m: m, name: name}
}

type execModel struct {
	m    *exec.Model
	name string
}

func (e *execModel) Name() string { return e.name }

func (e *execModel) MaxContext() int { return e.m.Config().MaxPositionEmbeddings }

func (e *execModel) Close() error { return e.m.Close() }

func (e *execModel) NewSession(capacity int) (Session, error) {
	s, err := e.m.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	return &execSession{s: s}, nil
}

func (e *execModel) NewSampler(p sampling) Sampler {
	return exec.NewSampler(exec.SamplingParams{
		Temperature:      p.Temperature,
		TopK:             p.TopK,
		TopP:             p.TopP,
		MinP:             p.MinP,
		Seed:             p.Seed,
		PresencePenalty:  p.PresencePenalty,
		FrequencyPenalty: p.FrequencyPenalty,
	})
}

// execSession adapts *exec.Session.
type execSession struct {
	s *exec.Session
}

type execSnapshot struct{ s *exec.Snapshot }

func (x execSnapshot) Len() int     { return x.s.Len }
func (x execSnapshot) Bytes() int64 { return x.s.Bytes() }

func (e *execSession) Len() int          { return e.s.Len() }
func (e *execSession) Capacity() int     { return e.s.Capacity() }
func (e *execSession) Logits() []float32 { return e.s.Logits() }
func (e *execSession) Reset()            { e.s.Reset() }
func (e *execSession) Snapshot() (Snapshot, error) {
	snap, err := e.s.Snapshot()
	if err != nil {
		return nil, err
	}
	return execSnapshot{snap}, nil
}

func (e *execSession) Restore(snap Snapshot) error {
	x, ok := snap.(execSnapshot)
	if !ok {
		return fmt.Errorf("restore: snapshot of type %T is not from this engine", snap)
	}
	return e.s.Restore(x.s)
}

func (e *execSession) Prefill(ctx context.Context, tokens []int32, every int, on func(Snapshot)) error {
	opts := exec.PrefillOptions{SnapshotEvery: every}
	if on != nil {
		opts.OnSnapshot = func(s *exec.Snapshot) { on(execSnapshot{s}) }
	}
	return e.s.Prefill(ctx, tokens, opts)
}

func (e *execSession) Decode(ctx context.Context, token int32) error {
	return e.s.Decode(ctx, token)
}
