package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// Session is one conversation's state on a model: the tokens it has consumed (as KV
// cache, conv and recurrent state) and the logits after the last one. A session is not
// safe for concurrent use, except DecodeSteps.
type Session struct {
	m        *Model
	st       State
	capacity int
	n        int
	logits   []float32
	// decodeSteps counts decode steps run; read from other goroutines (the server's
	// cancellation bookkeeping).
	decodeSteps atomic.Int64
	// resident[k] is the KV block whose rows KV block slot k of the state holds now
	// (nil: unknown or overwritten); a snapshot reuses it and a restore skips its copy.
	resident []*KVBlock
}

// PrefillOptions say where a prefill is cut into pieces and where it is snapshotted.
// Floating-point results depend on how a prompt is cut into pieces, so a caller that
// reuses snapshots across prompts cuts every prompt at points that depend only on the
// tokens before them (message headers, multiples of SnapshotEvery).
type PrefillOptions struct {
	// Cuts are session positions at which a prefill piece must end (any order; those
	// outside the prefill are ignored).
	Cuts []int
	// SnapshotEvery > 0 cuts at every multiple of it and snapshots there.
	SnapshotEvery int
	// SnapshotAt are further session positions to cut and snapshot at.
	SnapshotAt []int
	// OnSnapshot receives the snapshots, in order: at the multiples of SnapshotEvery, at
	// SnapshotAt, and at the end of the prefill. None are taken when it is nil.
	OnSnapshot func(*Snapshot)
	// ShareKV, when set, offers an existing block holding exactly the KV rows
	// [start, end) this session now holds (another conversation's, with the same tokens
	// cut the same way), so a snapshot references it instead of copying; nil: none.
	ShareKV func(start, end int) *KVBlock
}

// Len is the number of tokens the session has consumed.
func (s *Session) Len() int { return s.n }

// Capacity is the most tokens the session can hold.
func (s *Session) Capacity() int { return s.capacity }

// Logits are the logits after the last consumed token, valid until the next call.
func (s *Session) Logits() []float32 { return s.logits }

// Reset empties the session.
func (s *Session) Reset() {
	if s.st != nil {
		s.st.Zero()
	}
	s.n = 0
	s.logits = nil
	clear(s.resident)
}

// DecodeSteps is how many decode steps the session has run in its life. Unlike the
// other methods it may be called from any goroutine.
func (s *Session) DecodeSteps() int64 { return s.decodeSteps.Load() }

// Close frees the session's state (host and device memory). It is safe to call twice;
// the session cannot be used afterwards (calls return errors).
func (s *Session) Close() error {
	if s.st == nil {
		return nil
	}
	err := s.st.Close()
	s.st, s.n, s.logits, s.resident = nil, 0, nil, nil
	return err
}

var errSessionClosed = errors.New("the session is closed")

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
	if err := ctx.Err(); err != nil {
		return err
	}
	s.decodeSteps.Add(1)
	_, err := s.run(ctx, tokens, false)
	return err
}

func (s *Session) forward(ctx context.Context, tokens []int32, opts PrefillOptions, keep bool) ([]float32, error) {
	// Validate everything before the first piece runs, so bad input leaves the session as
	// it was instead of half-consumed.
	if err := s.validate(tokens); err != nil {
		return nil, err
	}
	end := s.n + len(tokens)
	cuts := opts.cutsIn(s.n, end)
	var all []float32
	for len(tokens) > 0 {
		size := s.m.pieceSize(len(tokens))
		// End the piece at the next cut so the pieces between two cuts depend only on them.
		for len(cuts) > 0 && cuts[0] <= s.n {
			cuts = cuts[1:]
		}
		if len(cuts) > 0 && cuts[0]-s.n < size {
			size = s.m.pieceSize(cuts[0] - s.n)
		}
		rows, err := s.run(ctx, tokens[:size], keep)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		tokens = tokens[size:]
		if opts.OnSnapshot != nil && (len(tokens) == 0 || opts.snapshotAt(s.n)) {
			snap, err := s.snapshot(opts.ShareKV)
			if err != nil {
				return nil, err
			}
			opts.OnSnapshot(snap)
		}
	}
	return all, nil
}

// cutsIn lists, ascending and unique, the cut positions strictly inside (from, to).
func (o *PrefillOptions) cutsIn(from, to int) []int {
	var cuts []int
	for _, c := range append(slices.Clone(o.Cuts), o.SnapshotAt...) {
		if c > from && c < to {
			cuts = append(cuts, c)
		}
	}
	if o.SnapshotEvery > 0 {
		for c := (from/o.SnapshotEvery + 1) * o.SnapshotEvery; c < to; c += o.SnapshotEvery {
			cuts = append(cuts, c)
		}
	}
	slices.Sort(cuts)
	return slices.Compact(cuts)
}

func (o *PrefillOptions) snapshotAt(n int) bool {
	return (o.SnapshotEvery > 0 && n%o.SnapshotEvery == 0) || slices.Contains(o.SnapshotAt, n)
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
	s.overwrite(s.n, s.n+len(tokens))
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
	if s.st == nil {
		return errSessionClosed
	}
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
