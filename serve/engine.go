package serve

import "context"

// The server drives the engine through these narrow interfaces. They mirror pistil/exec
// one to one (engine_exec.go adapts it) and exist so the scheduler can count the engine
// steps it runs: that count is how the tests prove a cancelled request stops consuming
// the engine within one decode step. There is no other implementation; tests run the
// real engine on a tiny random model.

// Model is one loaded model.
type Model interface {
	// Name is the served model id.
	Name() string
	// MaxContext is the model's trained context length.
	MaxContext() int
	NewSession(capacity int) (Session, error)
	NewSampler(s sampling) Sampler
	Close() error
}

// Session is one sequence's state: KV cache, conv and recurrent state.
type Session interface {
	Len() int
	Capacity() int
	// Prefill appends tokens in chunks, checking ctx between chunks. With snapshotEvery
	// > 0 it calls onSnapshot at every multiple of snapshotEvery and at the end.
	Prefill(ctx context.Context, tokens []int32, snapshotEvery int, onSnapshot func(Snapshot)) error
	// Decode appends one token.
	Decode(ctx context.Context, token int32) error
	// Logits after the last appended token, valid until the next call.
	Logits() []float32
	Snapshot() (Snapshot, error)
	Restore(Snapshot) error
	Reset()
}

// Snapshot is a deep copy of a session's state at Len tokens.
type Snapshot interface {
	Len() int
	Bytes() int64
}

// Sampler picks the next token.
type Sampler interface {
	Sample(logits []float32, history []int32) int32
}
