package serve

import (
	"context"
	"fmt"
	"slices"
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
	// steps counts decode steps; read by the cancellation bookkeeping.
	steps atomic.Int64
}

// genTask is one generation: the prompt, limits, and where its tokens go.
type genTask struct {
	prompt []int32
	// splits are the prompt positions where prefill is cut and snapshotted besides the
	// multiples of snapshotEvery (ascending).
	splits     []int
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

	start, err := r.restore(t.prompt, t.splits)
	if err != nil {
		return res, err
	}
	res.CachedTokens = start
	r.metrics.promptTokens.Add(int64(len(t.prompt)))
	r.metrics.cachedTokens.Add(int64(start))

	defer func() { res.Prefilled = min(r.sess.Len(), len(t.prompt)) - start }()

	prefillStart := time.Now()
	// Snapshots cost a copy of the state, so they are taken only where a later request is
	// likely to restore: every snapshotEvery tokens, at the generation prompt's header (the
	// last split, where the next turn diverges) and at the end of the prompt.
	lastSplit := -1
	if len(t.splits) > 0 {
		lastSplit = t.splits[len(t.splits)-1]
	}
	for _, seg := range prefillSegments(start, r.cutPoints(t.splits, start, len(t.prompt)), len(t.prompt)) {
		if err := r.sess.Prefill(ctx, t.prompt[seg[0]:seg[1]], 0, nil); err != nil {
			return res, fmt.Errorf("prefill: %w", err)
		}
		r.metrics.prefillTokens.Add(int64(seg[1] - seg[0]))
		if end := seg[1]; end == len(t.prompt) || end == lastSplit || r.onGrid(end) {
			snap, err := r.sess.Snapshot()
			if err != nil {
				return res, fmt.Errorf("prefill: %w", err)
			}
			r.cache.add(t.prompt[:end], snap)
		}
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
		logits = r.sess.Logits()
	}
	res.DecodeTime = time.Since(decodeStart)
	r.metrics.generatedTokens.Add(int64(len(res.Tokens)))
	return res, nil
}

// restore puts the session at the longest cached prefix of prompt that is exact, and
// returns its length (0: start from scratch).
//
// Exact means the snapshot holds bit for bit the state a cold prefill of this prompt
// computes at that point, so a cached run produces exactly the tokens a cold run does.
// Floating-point results depend on how a prompt is cut into prefill pieces, and the
// engine cuts a prefill call at multiples of snapshotEvery and by the call's end. Every
// prefill here is cut at the prompt's split points, which depend only on the tokens before
// them; so a snapshot is exact at a split point of this prompt, at a multiple of
// snapshotEvery, or at the end of an identical prompt. State reached by decoding
// (a previous answer) is never reused: decode steps round differently from prefill.
func (r *runner) restore(prompt []int32, splits []int) (int, error) {
	usable := func(n int) bool {
		if n == len(prompt) || r.onGrid(n) {
			return true
		}
		_, found := slices.BinarySearch(splits, n)
		return found
	}
	if ent := r.cache.lookup(prompt, usable); ent != nil {
		if err := r.sess.Restore(ent.snap); err != nil {
			r.sess.Reset()
			return 0, fmt.Errorf("restore cached prefix: %w", err)
		}
		return len(ent.tokens), nil
	}
	r.sess.Reset()
	return 0, nil
}

func (r *runner) onGrid(n int) bool { return r.snapshotEvery > 0 && n%r.snapshotEvery == 0 }

// cutPoints merges the prompt's split points with the multiples of snapshotEvery inside
// (start, end), ascending and unique. Every cut depends only on the tokens before it, so
// two prompts with a common prefix are cut alike within it.
func (r *runner) cutPoints(splits []int, start, end int) []int {
	var pts []int
	if r.snapshotEvery > 0 {
		for p := (start/r.snapshotEvery + 1) * r.snapshotEvery; p < end; p += r.snapshotEvery {
			pts = append(pts, p)
		}
	}
	pts = append(pts, splits...)
	slices.Sort(pts)
	return slices.Compact(pts)
}

// prefillSegments cuts prompt[start:end] at every split point strictly inside it.
func prefillSegments(start int, splits []int, end int) [][2]int {
	var segs [][2]int
	for _, p := range splits {
		if p > start && p < end {
			segs = append(segs, [2]int{start, p})
			start = p
		}
	}
	if start < end {
		segs = append(segs, [2]int{start, end})
	}
	return segs
}
