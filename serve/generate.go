package serve

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// runner owns the engine session. Only the scheduler's goroutine calls run, so the
// session is never used concurrently.
type runner struct {
	model         Model
	sess          Session
	cache         *prefixCache
	snapshotEvery int
	metrics       *metrics
	// held is the token sequence whose state the session holds now (a prefix of the last
	// request's prompt + output), so a follow-up request can continue without a restore.
	held []int32
	// steps counts decode steps; read by the cancellation bookkeeping.
	steps atomic.Int64
}

// genTask is one generation: the prompt, limits, and where its tokens go.
type genTask struct {
	prompt []int32
	// boundary, when inside the prompt, is an extra snapshot point: the start of the
	// generation prompt, where the next turn of the conversation diverges when the
	// template drops the previous turn's reasoning.
	boundary   int
	maxTokens  int
	sampler    Sampler
	stopTokens map[int32]bool
	// onToken receives every generated token except stop tokens; true ends generation
	// with "stop" (a stop string matched).
	onToken func(id int32) bool
}

// genResult is what a generation did.
type genResult struct {
	Tokens       []int32 // generated tokens, the stop token (if any) included
	Finish       string  // "stop" or "length"
	PromptTokens int
	CachedTokens int
	// Prefilled is how many prompt tokens the engine ran (less than PromptTokens -
	// CachedTokens when the request was cancelled mid-prefill).
	Prefilled   int
	PrefillTime time.Duration
	DecodeTime  time.Duration
	// StepsAfterCancel is how many decode steps ran after ctx was cancelled (-1: it never
	// was).
	StepsAfterCancel int64
}

func (r *runner) run(ctx context.Context, t *genTask) (res genResult, err error) {
	res.PromptTokens = len(t.prompt)
	res.StepsAfterCancel = -1
	var stepsAtCancel atomic.Int64
	stepsAtCancel.Store(-1)
	stopWatch := context.AfterFunc(ctx, func() { stepsAtCancel.Store(r.steps.Load()) })
	defer func() {
		stopWatch()
		if at := stepsAtCancel.Load(); at >= 0 {
			res.StepsAfterCancel = r.steps.Load() - at
			r.metrics.noteStepsAfterCancel(res.StepsAfterCancel)
		}
	}()

	start, err := r.restore(t.prompt)
	if err != nil {
		return res, err
	}
	res.CachedTokens = start
	r.metrics.promptTokens.Add(int64(len(t.prompt)))
	r.metrics.cachedTokens.Add(int64(start))

	// seq is everything the session will have consumed; held always tracks its prefix
	// that the session really holds, also after an error or a cancel.
	seq := make([]int32, len(t.prompt), len(t.prompt)+t.maxTokens)
	copy(seq, t.prompt)
	defer func() {
		r.held = seq[:r.sess.Len()]
		res.Prefilled = min(r.sess.Len(), len(t.prompt)) - start
	}()

	prefillStart := time.Now()
	onSnap := func(s Snapshot) { r.cache.add(seq[:s.Len()], s) }
	for _, seg := range prefillSegments(start, t.boundary, len(t.prompt)) {
		if err := r.sess.Prefill(ctx, t.prompt[seg[0]:seg[1]], r.snapshotEvery, onSnap); err != nil {
			return res, fmt.Errorf("prefill: %w", err)
		}
		r.metrics.prefillTokens.Add(int64(seg[1] - seg[0]))
	}
	res.PrefillTime = time.Since(prefillStart)

	decodeStart := time.Now()
	res.Finish = "length"
	logits := r.sess.Logits()
	for len(res.Tokens) < t.maxTokens {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		id := t.sampler.Sample(logits, res.Tokens)
		res.Tokens = append(res.Tokens, id)
		if t.stopTokens[id] {
			res.Finish = "stop"
			break
		}
		if t.onToken(id) {
			res.Finish = "stop"
			break
		}
		if len(res.Tokens) == t.maxTokens || r.sess.Len() >= r.sess.Capacity() {
			break
		}
		// The last sampled token is only fed back when another one is wanted.
		r.steps.Add(1)
		r.metrics.decodeSteps.Add(1)
		if err := r.sess.Decode(ctx, id); err != nil {
			return res, fmt.Errorf("decode: %w", err)
		}
		seq = append(seq, id)
		logits = r.sess.Logits()
	}
	res.DecodeTime = time.Since(decodeStart)
	r.metrics.generatedTokens.Add(int64(len(res.Tokens)))
	if len(seq) > len(t.prompt) && r.sess.Len() == len(seq) {
		// The end of a generation is where the next turn most often continues from.
		r.cache.add(seq, r.sess.Snapshot())
	}
	return res, nil
}

// restore puts the session at the longest reusable prefix of prompt: the state it already
// holds, or the longest cached snapshot. It returns the number of reused tokens.
func (r *runner) restore(prompt []int32) (int, error) {
	live := 0
	if n := len(r.held); n > 0 && n <= len(prompt) && r.sess.Len() == n && commonPrefix(r.held, prompt) == n {
		live = n
	}
	if live == len(prompt) && live > 0 {
		// The exact prompt is held; its logits are current only if nothing was generated
		// after it, which held guarantees (held is a prefix of the consumed sequence).
		return live, nil
	}
	if ent := r.cache.lookup(prompt); ent != nil && len(ent.tokens) > live {
		if err := r.sess.Restore(ent.snap); err != nil {
			r.sess.Reset()
			r.held = nil
			return 0, fmt.Errorf("restore cached prefix: %w", err)
		}
		r.held = ent.tokens
		return len(ent.tokens), nil
	}
	if live > 0 {
		return live, nil
	}
	r.sess.Reset()
	r.held = nil
	return 0, nil
}

// prefillSegments splits prompt[start:end] at boundary (when it lies strictly inside)
// so that a snapshot lands exactly there.
func prefillSegments(start, boundary, end int) [][2]int {
	if start >= end {
		return nil
	}
	if boundary > start && boundary < end {
		return [][2]int{{start, boundary}, {boundary, end}}
	}
	return [][2]int{{start, end}}
}
