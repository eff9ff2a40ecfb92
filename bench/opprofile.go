package bench

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"pistil/exec"
	"pistil/plan"
)

// OpTime is one op's part of a measurement's timed runs (Spec.OpProfile): the wall time of
// its dispatches, and the bytes and flops the plans count for them.
type OpTime struct {
	Op string `json:"op"`
	// Dispatches is how many dispatches of the op a step runs (a decode step; a prefill
	// measurement's largest piece, a full chunk where the prompt has one).
	Dispatches      int     `json:"dispatches"`
	SecondsPerToken float64 `json:"seconds_per_token"`
	// Share is the op's part of the timed runs' wall time.
	Share float64 `json:"share"`
	// BytesPerToken is what the op's dispatches read and write a token, by the plans' count;
	// GBPerSec and GFLOPS are that and its flops over the op's own time.
	BytesPerToken int64   `json:"bytes_per_token,omitempty"`
	GBPerSec      float64 `json:"gb_per_sec,omitempty"`
	GFLOPS        float64 `json:"gflops,omitempty"`
}

// OpsShare is the part of a measurement's timed wall time its op profile accounts for (the
// rest is outside the dispatches: sampling, the session's bookkeeping, the loop itself).
func (m Measurement) OpsShare() float64 {
	s := 0.0
	for _, o := range m.Ops {
		s += o.Share
	}
	return s
}

// opProfiler attaches a fresh exec.DispatchTimes to the model for one measurement's timed
// runs (not its warm-ups).
type opProfiler struct{ m *exec.Model }

func (p *opProfiler) start() (*exec.DispatchTimes, error) {
	if p == nil {
		return nil, nil
	}
	t := exec.NewDispatchTimes()
	if err := p.m.TimeDispatches(t); err != nil {
		return nil, fmt.Errorf("op profile: %w", err)
	}
	return t, nil
}

func (p *opProfiler) stop() {
	if p != nil {
		p.m.TimeDispatches(nil)
	}
}

// planSteps is one plan that a measurement's runs ran: its token count and the contexts
// its steps started at in one run.
type planSteps struct {
	tokens   int
	contexts []int
}

// stepsOf are the plans a measurement's run steps through: DecodeTokens one-token steps
// from the context, or the prompt's prefill pieces from the depth.
func stepsOf(meas *Measurement, decode bool, chunk int) []planSteps {
	if decode {
		s := planSteps{tokens: 1}
		for i := range meas.Tokens {
			s.contexts = append(s.contexts, meas.Context+i)
		}
		return []planSteps{s}
	}
	var out []planSteps
	pos := meas.Context
	for _, piece := range prefillPieces(meas.Tokens, chunk) {
		i := slices.IndexFunc(out, func(s planSteps) bool { return s.tokens == piece })
		if i < 0 {
			out = append(out, planSteps{tokens: piece})
			i = len(out) - 1
		}
		out[i].contexts = append(out[i].contexts, pos)
		pos += piece
	}
	return out
}

// opProfile turns a measurement's dispatch times into its per-op table, with the bytes and
// flops of each dispatch from plans (at contexts 1 and 2, linear in between as
// planCosts; Measure requires them with an op profile). It checks that every plan ran as
// many steps as the measurement's runs imply, so a profile never silently mixes in other
// work.
func opProfile(meas *Measurement, decode bool, chunk int, times *exec.DispatchTimes, plans func(tokens, context int) (*plan.Plan, error)) ([]OpTime, error) {
	runs := len(meas.Runs)
	wall := 0.0
	for _, r := range meas.Runs {
		wall += r.Seconds
	}
	tokens := float64(runs * meas.Tokens)
	type acc struct {
		nanos        time.Duration
		bytes, flops float64
		dispatches   int
	}
	byOp := map[string]*acc{}
	var order []string
	largest := 0
	for _, ps := range stepsOf(meas, decode, chunk) {
		durations, steps := times.Of(ps.tokens)
		if want := runs * len(ps.contexts); steps != want {
			return nil, fmt.Errorf("op profile: the %d-token plan ran %d steps in the timed runs, want %d", ps.tokens, steps, want)
		}
		p1, err := plans(ps.tokens, 1)
		if err != nil {
			return nil, err
		}
		p2, err := plans(ps.tokens, 2)
		if err != nil {
			return nil, err
		}
		if len(p1.Dispatches) != len(durations) || len(p2.Dispatches) != len(durations) {
			return nil, fmt.Errorf("op profile: the %d-token plan has %d dispatches, the program timed %d", ps.tokens, len(p1.Dispatches), len(durations))
		}
		count := map[string]int{}
		for i, d := range p1.Dispatches {
			if p2.Dispatches[i].Op != d.Op {
				return nil, fmt.Errorf("op profile: dispatch %d of the %d-token plan is %s at context 1 and %s at 2", i, ps.tokens, d.Op, p2.Dispatches[i].Op)
			}
			a := byOp[d.Op]
			if a == nil {
				a = &acc{}
				byOp[d.Op] = a
				order = append(order, d.Op)
			}
			a.nanos += durations[i]
			// Summed over the steps of one run: the cost at context c is at1 + (c-1)·slope.
			for _, c := range ps.contexts {
				at := func(x1, x2 int64) float64 { return float64(x1) + float64(c-1)*float64(x2-x1) }
				a.bytes += float64(runs) * (at(d.BytesRead, p2.Dispatches[i].BytesRead) + at(d.BytesWritten, p2.Dispatches[i].BytesWritten))
				a.flops += float64(runs) * at(d.Flops, p2.Dispatches[i].Flops)
			}
			count[d.Op]++
		}
		if ps.tokens > largest {
			largest = ps.tokens
			for op, a := range byOp {
				a.dispatches = count[op]
			}
		}
	}
	var out []OpTime
	for _, op := range order {
		a := byOp[op]
		secs := a.nanos.Seconds()
		o := OpTime{Op: op, Dispatches: a.dispatches, SecondsPerToken: secs / tokens, BytesPerToken: int64(a.bytes / tokens)}
		if wall > 0 {
			o.Share = secs / wall
		}
		if secs > 0 {
			o.GBPerSec, o.GFLOPS = a.bytes/secs/1e9, a.flops/secs/1e9
		}
		out = append(out, o)
	}
	slices.SortStableFunc(out, func(a, b OpTime) int { return cmp.Compare(b.SecondsPerToken, a.SecondsPerToken) })
	return out, nil
}
