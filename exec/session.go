package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Session is one conversation's state on a model: the tokens it has consumed (as KV
// cache, conv and recurrent state) and the logits after the last one. A session is not
// safe for concurrent use.
type Session struct {
	m        *Model
	st       State
	capacity int
	n        int
	logits   []float32
}

// Snapshot is a host copy of a session's state at a token boundary. The Gated DeltaNet
// state cannot be rolled back, so reusing a prefix of a conversation means restoring a
// snapshot taken at exactly that prefix length.
type Snapshot struct {
	Len    int
	data   map[string][]byte
	logits []float32
}

// Bytes is the host memory the snapshot holds.
func (s *Snapshot) Bytes() int64 {
	n := int64(4 * len(s.logits))
	for _, d := range s.data {
		n += int64(len(d))
	}
	return n
}

// PrefillOptions ask for snapshots while prefilling.
type PrefillOptions struct {
	// SnapshotEvery > 0 takes a snapshot whenever the session length reaches a multiple of
	// it, and one at the end of the prefill.
	SnapshotEvery int
	OnSnapshot    func(*Snapshot)
}

// Len is the number of tokens the session has consumed.
func (s *Session) Len() int { return s.n }

// Capacity is the most tokens the session can hold.
func (s *Session) Capacity() int { return s.capacity }

// Logits are the logits after the last consumed token, valid until the next call.
func (s *Session) Logits() []float32 { return s.logits }

// Reset empties the session.
func (s *Session) Reset() {
	s.st.Zero()
	s.n = 0
	s.logits = nil
}

// Prefill consumes tokens in chunks, checking ctx between chunks.
func (s *Session) Prefill(ctx context.Context, tokens []int32, opts PrefillOptions) error {
	_, err := s.forward(ctx, tokens, opts, false)
	return err
}

// Forward consumes tokens like Prefill and returns the logits of every one of them,
// row-major. It needs a model opened with AllLogits (pistil check).
func (s *Session) Forward(ctx context.Context, tokens []int32) ([]float32, error) {
	if !s.m.opts.AllLogits {
		return nil, errors.New("Forward needs a model opened with AllLogits")
	}
	return s.forward(ctx, tokens, PrefillOptions{}, true)
}

// Decode consumes one token through the decode plan.
func (s *Session) Decode(ctx context.Context, token int32) error {
	tokens := []int32{token}
	if err := s.validate(tokens); err != nil {
		return err
	}
	_, err := s.run(ctx, tokens, false)
	return err
}

func (s *Session) forward(ctx context.Context, tokens []int32, opts PrefillOptions, keep bool) ([]float32, error) {
	// Validate everything before the first piece runs, so bad input leaves the session as
	// it was instead of half-consumed.
	if err := s.validate(tokens); err != nil {
		return nil, err
	}
	every := opts.SnapshotEvery
	snapshots := every > 0 && opts.OnSnapshot != nil
	var all []float32
	for len(tokens) > 0 {
		size := s.m.pieceSize(len(tokens))
		if snapshots {
			// End the piece at the next snapshot boundary so the snapshot lands exactly there.
			if toBoundary := every - s.n%every; toBoundary < size {
				size = s.m.pieceSize(toBoundary)
			}
		}
		rows, err := s.run(ctx, tokens[:size], keep)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		tokens = tokens[size:]
		if snapshots && (s.n%every == 0 || len(tokens) == 0) {
			snap, err := s.Snapshot()
			if err != nil {
				return nil, err
			}
			opts.OnSnapshot(snap)
		}
	}
	return all, nil
}

// run executes one program of exactly len(tokens) tokens, already validated.
func (s *Session) run(ctx context.Context, tokens []int32, keep bool) ([]float32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	vocab := s.m.cfg.VocabSize
	prog, err := s.m.program(len(tokens))
	if err != nil {
		return nil, err
	}
	rows, err := prog.Run(ctx, s.st, tokens, s.n)
	if err != nil {
		// A step that failed part-way has left the state undefined: the session must not
		// continue from it as if it were whole.
		s.Reset()
		return nil, fmt.Errorf("step at position %d: %w (session reset)", s.n, err)
	}
	s.n += len(tokens)
	last := rows[len(rows)-vocab:]
	s.logits = append(s.logits[:0], last...)
	if keep {
		return slices.Clone(rows), nil
	}
	return nil, nil
}

func (s *Session) validate(tokens []int32) error {
	vocab := s.m.cfg.VocabSize
	for i, id := range tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("token %d (id %d) is outside the vocabulary [0, %d)", i, id, vocab)
		}
	}
	if s.n+len(tokens) > s.capacity {
		return fmt.Errorf("context full: %d tokens after %d exceed the session capacity %d", len(tokens), s.n, s.capacity)
	}
	return nil
}

// Snapshot copies the session's state.
func (s *Session) Snapshot() (*Snapshot, error) {
	data, err := s.st.Export(s.n)
	if err != nil {
		return nil, fmt.Errorf("snapshot at %d tokens: %w", s.n, err)
	}
	return &Snapshot{Len: s.n, data: data, logits: slices.Clone(s.logits)}, nil
}

// Restore makes the session exactly as it was when snap was taken (from this model).
func (s *Session) Restore(snap *Snapshot) error {
	if snap.Len > s.capacity {
		return fmt.Errorf("snapshot of %d tokens exceeds the session capacity %d", snap.Len, s.capacity)
	}
	if err := s.st.Import(snap.data); err != nil {
		return err
	}
	s.n = snap.Len
	s.logits = append(s.logits[:0], snap.logits...)
	return nil
}

// ErrStop, returned by GenerateOptions.OnToken, ends generation normally with finish
// reason "stop" (a stop string matched).
var ErrStop = errors.New("stop")

// GenerateOptions control one generation.
type GenerateOptions struct {
	MaxTokens  int
	Sampling   SamplingParams
	StopTokens []int32
	Prefill    PrefillOptions
	// OnToken sees each generated token (stop tokens included) as it is chosen. A non-nil
	// error stops generation; ErrStop stops it as a normal "stop".
	OnToken func(id int32) error
}

// GenerateResult describes a finished generation.
type GenerateResult struct {
	Tokens       []int32
	FinishReason string // "stop" or "length"
	PromptTokens int
	// Prefill and decode speeds of this call (tokens per second of wall time).
	PrefillTokensPerSec, DecodeTokensPerSec float64
	PrefillTime, DecodeTime                 time.Duration
}

// Generate prefills prompt (which may be empty when the session already holds tokens)
// and samples up to MaxTokens tokens. The last generated token is not fed back, so
// afterwards Len() counts the prompt and all but the last generated token.
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenerateOptions) (GenerateResult, error) {
	res := GenerateResult{PromptTokens: len(prompt), FinishReason: "length"}
	if len(prompt) == 0 && s.n == 0 {
		return res, errors.New("empty prompt: nothing to continue from")
	}
	if o.MaxTokens <= 0 {
		return res, fmt.Errorf("max tokens %d must be positive", o.MaxTokens)
	}
	start := time.Now()
	if len(prompt) > 0 {
		if err := s.Prefill(ctx, prompt, o.Prefill); err != nil {
			return res, err
		}
	}
	res.PrefillTime = time.Since(start)
	if len(prompt) > 0 && res.PrefillTime > 0 {
		res.PrefillTokensPerSec = float64(len(prompt)) / res.PrefillTime.Seconds()
	}
	sampler := NewSampler(o.Sampling)
	start = time.Now()
	for len(res.Tokens) < o.MaxTokens {
		id := sampler.Sample(s.logits, res.Tokens)
		res.Tokens = append(res.Tokens, id)
		stop := slices.Contains(o.StopTokens, id)
		if o.OnToken != nil {
			if err := o.OnToken(id); err != nil {
				if errors.Is(err, ErrStop) {
					res.FinishReason = "stop"
					break
				}
				return res, err
			}
		}
		if stop {
			res.FinishReason = "stop"
			break
		}
		if len(res.Tokens) == o.MaxTokens {
			break
		}
		if s.n >= s.capacity {
			break // the context is full: finish with "length"
		}
		if err := s.Decode(ctx, id); err != nil {
			return res, err
		}
	}
	res.DecodeTime = time.Since(start)
	if n := len(res.Tokens) - 1; n > 0 && res.DecodeTime > 0 {
		res.DecodeTokensPerSec = float64(n) / res.DecodeTime.Seconds()
	}
	return res, nil
}
