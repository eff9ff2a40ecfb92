package serve

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"pistil/exec"
)

// runner owns the engine session. Only the scheduler's goroutine calls run, so the
// session is never used concurrently. Generation is exec's one loop (Session.Generate);
// the runner adds the prefix cache around it.
type runner struct {
	sess          *exec.Session
	cache         *prefixCache
	snapshotEvery int
	metrics       *metrics
	requests      uint64 // generations run, numbering their snapshots for eviction
}

// genTask is one generation: the prompt, limits, and where its tokens go.
type genTask struct {
	prompt []int32
	// splits are the prompt positions where prefill is cut and snapshotted besides the
	// multiples of snapshotEvery (ascending).
	splits     []int
	maxTokens  int
	sampler    exec.TokenSampler
	stopTokens map[int32]bool
	// onToken receives every generated token except stop tokens; true ends generation
	// with "stop" (a stop string matched).
	onToken func(id int32) bool
	// onLogits, when set, sees the logits each token was sampled from (logprobs).
	onLogits func(id int32, logits []float32)
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

// newSampler is the engine's sampler for a request's sampling parameters.
func newSampler(p sampling) *exec.Sampler {
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

func (r *runner) run(ctx context.Context, t *genTask) (res genResult, err error) {
	res.PromptTokens = len(t.prompt)
	res.StepsAfterCancel = -1
	// The session's decode-step count, read when ctx is cancelled and again at the end,
	// is how the tests prove a cancelled request stops within one decode step.
	var stepsAtCancel atomic.Int64
	stepsAtCancel.Store(-1)
	stopWatch := context.AfterFunc(ctx, func() { stepsAtCancel.Store(r.sess.DecodeSteps()) })
	defer func() {
		stopWatch()
		if at := stepsAtCancel.Load(); at >= 0 {
			res.StepsAfterCancel = r.sess.DecodeSteps() - at
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

	// Snapshots cost a copy of the recurrent state (the KV rows are shared blocks), so
	// they are taken only where a later request is likely to restore: every snapshotEvery
	// tokens, at the generation prompt's header (the last split, where the next turn
	// diverges) and at the end of the prompt. The prefill is cut at every split, so the
	// pieces before a split depend only on the tokens before it.
	r.requests++
	request := r.requests
	keys := newBlockKeys(t.prompt, t.splits, r.snapshotEvery)
	prefill := exec.PrefillOptions{Cuts: t.splits, SnapshotEvery: r.snapshotEvery,
		ShareKV: func(start, end int) *exec.KVBlock { return r.cache.shared(keys.key(start, end)) },
		OnSnapshot: func(snap *exec.Snapshot) {
			_, split := slices.BinarySearch(t.splits, snap.Len)
			boundary := split || snap.Len == len(t.prompt)
			r.cache.add(t.prompt[:snap.Len], snap, boundary, request, func(b *exec.KVBlock) string { return keys.key(b.Start, b.End) })
		}}
	if len(t.splits) > 0 {
		prefill.SnapshotAt = t.splits[len(t.splits)-1:]
	}
	var stops []int32
	for id := range t.stopTokens {
		stops = append(stops, id)
	}
	gen, err := r.sess.Generate(ctx, t.prompt[start:], exec.GenerateOptions{
		MaxTokens: t.maxTokens, Sampler: t.sampler, StopTokens: stops, Prefill: prefill, OnLogits: t.onLogits,
		OnToken: func(id int32) error {
			if t.stopTokens[id] {
				return nil // the loop ends on it; stop tokens are not text
			}
			if t.onToken(id) {
				return exec.ErrStop
			}
			return nil
		},
	})
	res.Tokens, res.Finish = gen.Tokens, gen.FinishReason
	res.PrefillTime, res.DecodeTime = gen.PrefillTime, gen.DecodeTime
	res.Prefilled = max(min(r.sess.Len(), len(t.prompt))-start, 0)
	r.metrics.prefillTokens.Add(int64(res.Prefilled))
	r.metrics.decodeSteps.Add(int64(gen.DecodeSteps))
	r.metrics.generatedTokens.Add(int64(len(res.Tokens)))
	if err != nil {
		return res, fmt.Errorf("generate: %w", err)
	}
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
