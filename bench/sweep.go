package bench

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"pistil/exec"
)

// SweepLengths are the published method's ten lengths, 256 to 128K tokens: each is both
// a prompt length (prefill speed) and a context length (decode speed after it).
var SweepLengths = []int{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}

// SweepSpec is a sweep: every length is prefilled into an empty session (timed), then
// DecodeTokens greedy steps are timed at that context. The whole list is run Repeats
// times, in ascending order on even repeats and descending on odd ones, so that a drift
// over time (thermal, other load) biases neither end; medians are reported.
type SweepSpec struct {
	Lengths      []int
	DecodeTokens int
	Repeats      int
	// Warmup runs one untimed prefill at each plan size the lengths need and one decode
	// step first (plans compile on first use).
	Warmup bool
	// Progress, when set, is told before each timed run.
	Progress func(repeat, index int, length int)
}

// Fit keeps the lengths that the model's maximum context and the memory budget allow,
// and says why the others were left out.
func Fit(lengths []int, decodeTokens, maxContext int, stateBytes func(capacity int) int64, memoryBudget int64) (kept []int, dropped []string) {
	for _, n := range lengths {
		switch {
		case maxContext > 0 && n+decodeTokens > maxContext:
			dropped = append(dropped, fmt.Sprintf("%d (past the model's maximum context %d)", n, maxContext))
		case memoryBudget > 0 && stateBytes(n+decodeTokens) > memoryBudget:
			dropped = append(dropped, fmt.Sprintf("%d (its state, %.2f GB, exceeds the %.2f GB available)",
				n, float64(stateBytes(n+decodeTokens))/1e9, float64(memoryBudget)/1e9))
		default:
			kept = append(kept, n)
		}
	}
	return kept, dropped
}

func (s SweepSpec) validate(maxContext int) error {
	if len(s.Lengths) == 0 {
		return errors.New("sweep: no lengths to measure")
	}
	for _, n := range s.Lengths {
		if n <= 0 {
			return fmt.Errorf("sweep: length %d must be positive", n)
		}
		if maxContext > 0 && n+s.DecodeTokens > maxContext {
			return fmt.Errorf("sweep: length %d plus %d decode tokens exceeds the model's maximum context %d", n, s.DecodeTokens, maxContext)
		}
	}
	if s.DecodeTokens <= 0 {
		return fmt.Errorf("sweep: decode tokens %d must be positive", s.DecodeTokens)
	}
	if s.Repeats <= 0 {
		return fmt.Errorf("sweep: repeats %d must be positive", s.Repeats)
	}
	return nil
}

// Sweep measures prefill and decode at every length of spec on one session sized for
// the longest. The result has the shape Measure's has (one prefill measurement per
// length, one decode measurement per context), so reports compare and plot alike.
func Sweep(ctx context.Context, m *exec.Model, spec SweepSpec) (*Result, error) {
	if err := spec.validate(m.Config().MaxPositionEmbeddings); err != nil {
		return nil, err
	}
	lengths := slices.Clone(spec.Lengths)
	slices.Sort(lengths)
	lengths = slices.Compact(lengths)
	capacity := lengths[len(lengths)-1] + spec.DecodeTokens
	s, err := m.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	ids := PromptIDs(capacity, m.Config().VocabSize)
	prefill := make([]Measurement, len(lengths))
	decode := make([]Measurement, len(lengths))
	for i, n := range lengths {
		prefill[i] = Measurement{Tokens: n}
		decode[i] = Measurement{Tokens: spec.DecodeTokens, Context: n}
	}
	one := func(i int) error {
		n := lengths[i]
		s.Reset()
		start := time.Now()
		if err := s.Prefill(ctx, ids[:n], exec.PrefillOptions{}); err != nil {
			return fmt.Errorf("prefill of %d tokens: %w", n, err)
		}
		prefill[i].Runs = append(prefill[i].Runs, timedRun(n, time.Since(start)))
		start = time.Now()
		if err := greedySteps(ctx, s, spec.DecodeTokens); err != nil {
			return fmt.Errorf("decode at context %d: %w", n, err)
		}
		decode[i].Runs = append(decode[i].Runs, timedRun(spec.DecodeTokens, time.Since(start)))
		return nil
	}
	if spec.Warmup {
		// Untimed: every plan size the lengths split into compiles and loads now, and the
		// decode plan runs once, so no timed run pays for a first use.
		for _, piece := range pieceSizes(lengths, m.Chunk()) {
			s.Reset()
			if err := s.Prefill(ctx, ids[:piece], exec.PrefillOptions{}); err != nil {
				return nil, fmt.Errorf("warm-up prefill of %d tokens: %w", piece, err)
			}
		}
		if err := greedySteps(ctx, s, 1); err != nil {
			return nil, fmt.Errorf("warm-up decode: %w", err)
		}
	}
	for r := range spec.Repeats {
		for k := range lengths {
			i := k
			if r%2 == 1 {
				i = len(lengths) - 1 - k
			}
			if spec.Progress != nil {
				spec.Progress(r, k, lengths[i])
			}
			if err := one(i); err != nil {
				return nil, err
			}
		}
	}
	for i := range lengths {
		summarise(&prefill[i])
		summarise(&decode[i])
	}
	return &Result{Capacity: capacity, Prefill: prefill, Decode: decode}, nil
}

// greedySteps runs exactly steps decode steps from a session that holds a prompt,
// through exec's generation loop: it feeds back all but its last token, so steps+1
// tokens are steps decode steps.
func greedySteps(ctx context.Context, s *exec.Session, steps int) error {
	res, err := s.Generate(ctx, nil, exec.GenerateOptions{MaxTokens: steps + 1})
	if err == nil && res.DecodeSteps != steps {
		err = fmt.Errorf("%d decode steps ran, want %d", res.DecodeSteps, steps)
	}
	return err
}

// pieceSizes are the distinct plan sizes prompts of these lengths run as: whole chunks,
// then the powers of two the remainder splits into (exec's prefill rule).
func pieceSizes(lengths []int, chunk int) []int {
	var sizes []int
	for _, n := range lengths {
		for n > 0 {
			p := chunk
			if n < chunk {
				p = 1 << (bits.Len(uint(n)) - 1)
			}
			if !slices.Contains(sizes, p) {
				sizes = append(sizes, p)
			}
			n -= p
		}
	}
	slices.Sort(sizes)
	return sizes
}

func timedRun(tokens int, d time.Duration) Run {
	secs := max(d.Seconds(), 1e-9) // a clock too coarse for the run must not divide by 0
	return Run{Seconds: secs, TokensPerSec: float64(tokens) / secs}
}

// summarise sets the median, min and max of a measurement's runs.
func summarise(meas *Measurement) {
	tps := make([]float64, len(meas.Runs))
	for i, r := range meas.Runs {
		tps[i] = r.TokensPerSec
	}
	if len(tps) == 0 {
		return
	}
	slices.Sort(tps)
	meas.MinTPS, meas.MaxTPS = tps[0], tps[len(tps)-1]
	if n := len(tps); n%2 == 1 {
		meas.MedianTPS = tps[n/2]
	} else {
		meas.MedianTPS = (tps[n/2-1] + tps[n/2]) / 2
	}
}
