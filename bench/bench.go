// Package bench measures a model's prefill and decode speed the way `pistil bench`
// reports it: deterministic synthetic prompts, warm-up runs that are not timed, and
// repeated timed runs kept raw so that medians and spreads can be recomputed.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"pistil/exec"
	"pistil/plan"
)

// Seed fixes the pseudo-random prompt ids, so every run of the benchmark feeds the same
// tokens.
const Seed = 1

// Spec says what to measure.
type Spec struct {
	// Prompts are the prompt lengths whose prefill is timed, each on top of every depth.
	Prompts []int
	// Depths are the context lengths (tokens already in the session) the prompts are
	// prefilled on, as llama-bench's -d; none means an empty session only.
	Depths []int
	// Contexts are the context lengths decode is timed at.
	Contexts []int
	// DecodeTokens are the decode steps timed per run.
	DecodeTokens int
	// Repeats are the timed runs per measurement; Warmup the untimed runs before them.
	Repeats, Warmup int
	// BandwidthBytes is the buffer the streaming read bandwidth is measured with before
	// anything else (MeasureBandwidth; 0: not measured).
	BandwidthBytes int64
	// Plans, when set, compiles the model's plan for steps of tokens with its costs
	// counted at a context length (exec.CompilePlan with Options.CostContext): the bytes
	// per token and flops of the measurements come from them (addRoofline).
	Plans func(tokens, context int) (*plan.Plan, error)
	// OpProfile times every dispatch of the timed runs and adds each measurement's time
	// by op (Measurement.Ops; the CPU backend only: exec.Model.TimeDispatches). It needs
	// Plans, for the bytes and flops of each op.
	OpProfile bool
}

// Capacity is the session capacity the spec needs: the longest prompt, or the longest
// context plus the decode steps that follow it.
func (s Spec) Capacity() int {
	c := 0
	for _, p := range s.Prompts {
		for _, d := range s.depths() {
			c = max(c, d+p)
		}
	}
	for _, ctx := range s.Contexts {
		c = max(c, ctx+s.DecodeTokens)
	}
	return c
}

// depths are the prefill depths, an empty session when none are given.
func (s Spec) depths() []int {
	if len(s.Depths) == 0 {
		return []int{0}
	}
	return s.Depths
}

// Validate checks the spec against the longest context the model supports.
func (s Spec) Validate(maxContext int) error {
	if len(s.Prompts) == 0 && len(s.Contexts) == 0 {
		return errors.New("nothing to measure: give at least one prompt length or context length")
	}
	for _, p := range s.Prompts {
		if p <= 0 {
			return fmt.Errorf("prompt length %d must be positive", p)
		}
	}
	for _, c := range s.Contexts {
		if c < 0 {
			return fmt.Errorf("context length %d must not be negative", c)
		}
	}
	for _, d := range s.Depths {
		if d < 0 {
			return fmt.Errorf("prefill depth %d must not be negative", d)
		}
	}
	if s.DecodeTokens <= 0 {
		return fmt.Errorf("decode tokens %d must be positive", s.DecodeTokens)
	}
	if s.Repeats <= 0 {
		return fmt.Errorf("repeats %d must be positive", s.Repeats)
	}
	if s.Warmup < 0 {
		return fmt.Errorf("warm-up runs %d must not be negative", s.Warmup)
	}
	if s.BandwidthBytes < 0 {
		return fmt.Errorf("bandwidth buffer %d bytes must not be negative", s.BandwidthBytes)
	}
	if maxContext > 0 {
		for _, p := range s.Prompts {
			for _, d := range s.depths() {
				if d+p > maxContext && d == 0 {
					return fmt.Errorf("prompt length %d exceeds the model's maximum context %d", p, maxContext)
				}
				if d+p > maxContext {
					return fmt.Errorf("prompt length %d at depth %d exceeds the model's maximum context %d", p, d, maxContext)
				}
			}
		}
		for _, c := range s.Contexts {
			if c+s.DecodeTokens > maxContext {
				return fmt.Errorf("context %d plus %d decode tokens exceeds the model's maximum context %d",
					c, s.DecodeTokens, maxContext)
			}
		}
	}
	return nil
}

// Run is one timed run.
type Run struct {
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_sec"`
}

// Measurement is the timed runs of one prompt length (prefill) or context length
// (decode), with their median and spread in tokens per second.
type Measurement struct {
	// Tokens are the tokens each run consumes: the prompt length, or the decode steps.
	Tokens int `json:"tokens"`
	// Context is the session length before the timed tokens: the decode context, or the
	// depth a prompt was prefilled on.
	Context   int     `json:"context"`
	Runs      []Run   `json:"runs"`
	MedianTPS float64 `json:"median_tokens_per_sec"`
	MinTPS    float64 `json:"min_tokens_per_sec"`
	MaxTPS    float64 `json:"max_tokens_per_sec"`
	// Roofline (addRoofline): a prefill run's flops and the GFLOP/s of its median; a
	// decode step's bytes read (weights among them) and the share of the measured
	// bandwidth its median reached.
	FlopsPerRun         int64   `json:"flops_per_run,omitempty"`
	MedianGFLOPS        float64 `json:"median_gflops,omitempty"`
	BytesPerToken       int64   `json:"bytes_per_token,omitempty"`
	WeightBytesPerToken int64   `json:"weight_bytes_per_token,omitempty"`
	BandwidthShare      float64 `json:"bandwidth_share,omitempty"`
	// BandwidthAfter is the streaming read line (every thread) measured right after a
	// decode measurement's timed runs, when the spec measures bandwidth.
	BandwidthAfter float64 `json:"bandwidth_after_bytes_per_sec,omitempty"`
	// Ops is the timed runs' wall time by op, longest first (Spec.OpProfile).
	Ops []OpTime `json:"ops,omitempty"`
	// times are the dispatch times Ops is made from.
	times *exec.DispatchTimes
}

// Result is every measurement of a spec.
type Result struct {
	Capacity  int           `json:"capacity"`
	Bandwidth *Bandwidth    `json:"bandwidth,omitempty"`
	Prefill   []Measurement `json:"prefill"`
	Decode    []Measurement `json:"decode"`
}

// Measure runs the spec on m. One session of spec.Capacity() tokens serves every
// measurement (Reset between prefill runs, a snapshot restored before every decode run),
// so a backend binds its programs to one state and decode runs do not repeat the prefill
// that brings the session to its context.
func Measure(ctx context.Context, m *exec.Model, spec Spec) (*Result, error) {
	if err := spec.Validate(m.Config().MaxPositionEmbeddings); err != nil {
		return nil, err
	}
	if spec.OpProfile && spec.Plans == nil {
		return nil, errors.New("an op profile needs the plans, for each op's bytes and flops")
	}
	var prof *opProfiler
	if spec.OpProfile {
		prof = &opProfiler{m: m}
	}
	capacity := spec.Capacity()
	s, err := m.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	ids := PromptIDs(capacity, m.Config().VocabSize)
	res := &Result{Capacity: capacity}
	var meter *bandwidthMeter
	if spec.BandwidthBytes > 0 {
		if meter, err = newBandwidthMeter(spec.BandwidthBytes, 0, 5); err != nil {
			return nil, err
		}
		bw := meter.measure()
		res.Bandwidth = &bw
	}
	for _, depth := range spec.depths() {
		if err := measurePrefill(ctx, s, spec, ids, depth, res, prof); err != nil {
			return nil, err
		}
	}
	for _, c := range spec.Contexts {
		meas, err := measureDecode(ctx, s, spec, ids[:c], prof)
		if err != nil {
			return nil, fmt.Errorf("decode at context %d: %w", c, err)
		}
		if meter != nil {
			meas.BandwidthAfter = meter.line()
		}
		res.Decode = append(res.Decode, meas)
	}
	// The roofline and the op profile read the same plans (each token count at contexts 1
	// and 2): compile each once.
	plans := compiledOnce(spec.Plans)
	if plans != nil {
		if err := addRoofline(plans, m.Chunk(), res, spec.DecodeTokens); err != nil {
			return nil, fmt.Errorf("bytes and flops from the plans: %w", err)
		}
	}
	if spec.OpProfile {
		for i := range res.Prefill {
			meas := &res.Prefill[i]
			if meas.Ops, err = opProfile(meas, false, m.Chunk(), meas.times, plans); err != nil {
				return nil, fmt.Errorf("prefill of %d tokens at depth %d: %w", meas.Tokens, meas.Context, err)
			}
		}
		for i := range res.Decode {
			meas := &res.Decode[i]
			if meas.Ops, err = opProfile(meas, true, m.Chunk(), meas.times, plans); err != nil {
				return nil, fmt.Errorf("decode at context %d: %w", meas.Context, err)
			}
		}
	}
	return res, nil
}

// compiledOnce is plans remembering each plan it compiled (nil for nil).
func compiledOnce(plans func(tokens, context int) (*plan.Plan, error)) func(tokens, context int) (*plan.Plan, error) {
	if plans == nil {
		return nil
	}
	type key struct{ tokens, context int }
	done := map[key]*plan.Plan{}
	return func(tokens, context int) (*plan.Plan, error) {
		if p, ok := done[key{tokens, context}]; ok {
			return p, nil
		}
		p, err := plans(tokens, context)
		if err == nil {
			done[key{tokens, context}] = p
		}
		return p, err
	}
}

// measurePrefill times every prompt length prefilled on top of depth tokens: the depth
// is prefilled once and restored from a snapshot before every run (an empty session is
// a Reset).
func measurePrefill(ctx context.Context, s *exec.Session, spec Spec, ids []int32, depth int, res *Result, prof *opProfiler) error {
	s.Reset()
	var base *exec.Snapshot
	if depth > 0 {
		if err := s.Prefill(ctx, ids[:depth], exec.PrefillOptions{}); err != nil {
			return fmt.Errorf("prefill to depth %d: %w", depth, err)
		}
		var err error
		if base, err = s.Snapshot(); err != nil {
			return err
		}
		defer base.Release()
	}
	for _, n := range spec.Prompts {
		meas, err := measure(spec, n, func() (time.Duration, error) {
			if base == nil {
				s.Reset()
			} else if err := s.Restore(base); err != nil {
				return 0, err
			}
			start := time.Now()
			err := s.Prefill(ctx, ids[depth:depth+n], exec.PrefillOptions{})
			return time.Since(start), err
		}, prof)
		if err != nil {
			return fmt.Errorf("prefill of %d tokens at depth %d: %w", n, depth, err)
		}
		meas.Context = depth
		res.Prefill = append(res.Prefill, meas)
	}
	return nil
}

// measureDecode brings s to the context once, then times DecodeTokens greedy steps from
// a restored snapshot of it per run.
func measureDecode(ctx context.Context, s *exec.Session, spec Spec, context []int32, prof *opProfiler) (Measurement, error) {
	s.Reset()
	if len(context) > 0 {
		if err := s.Prefill(ctx, context, exec.PrefillOptions{}); err != nil {
			return Measurement{}, err
		}
	}
	snap, err := s.Snapshot()
	if err != nil {
		return Measurement{}, err
	}
	defer snap.Release()
	meas, err := measure(spec, spec.DecodeTokens, func() (time.Duration, error) {
		if err := s.Restore(snap); err != nil {
			return 0, err
		}
		// The generation loop feeds back all but its last token, so DecodeTokens+1 tokens
		// are DecodeTokens decode steps. An empty context starts from token 0, whose
		// one-token prefill runs the decode plan too.
		var first []int32
		tokens := spec.DecodeTokens + 1
		if s.Len() == 0 {
			first, tokens = []int32{0}, spec.DecodeTokens
		}
		start := time.Now()
		res, err := s.Generate(ctx, first, exec.GenerateOptions{MaxTokens: tokens})
		if steps := res.DecodeSteps + len(first); err == nil && steps != spec.DecodeTokens {
			err = fmt.Errorf("%d decode steps ran, want %d", steps, spec.DecodeTokens)
		}
		return time.Since(start), err
	}, prof)
	meas.Context = len(context)
	return meas, err
}

// measure runs timed Warmup times untimed, then Repeats times timed, those with their
// dispatches timed when prof is set.
func measure(spec Spec, tokens int, timed func() (time.Duration, error), prof *opProfiler) (Measurement, error) {
	meas := Measurement{Tokens: tokens}
	for range spec.Warmup {
		if _, err := timed(); err != nil {
			return meas, fmt.Errorf("warm-up: %w", err)
		}
	}
	times, err := prof.start()
	if err != nil {
		return meas, err
	}
	defer prof.stop()
	meas.times = times
	for range spec.Repeats {
		d, err := timed()
		if err != nil {
			return meas, err
		}
		meas.Runs = append(meas.Runs, timedRun(tokens, d))
	}
	summarise(&meas)
	return meas, nil
}

// PromptIDs are n pseudo-random token ids in [0, vocab), the same for every call with
// the same arguments; a shorter prompt is a prefix of a longer one.
func PromptIDs(n, vocab int) []int32 {
	r := rand.New(rand.NewPCG(Seed, Seed))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	return ids
}
