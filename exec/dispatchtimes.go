package exec

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DispatchTimes is the wall time each dispatch of a model's plans took, summed over the
// steps run while it was attached (Model.TimeDispatches), and the number of those steps,
// by plan (its token count): the per-op profile `pistil bench --op-profile` prints.
type DispatchTimes struct {
	mu    sync.Mutex
	plans map[int]*PlanTimes
}

// PlanTimes is one plan's part of a DispatchTimes. A program adds to it while it runs;
// read it once the runs are done.
type PlanTimes struct {
	// Nanos[i] is the time spent in dispatch i, summed over Steps runs of the plan.
	Nanos []atomic.Int64
	Steps atomic.Int64
}

// NewDispatchTimes is an empty DispatchTimes.
func NewDispatchTimes() *DispatchTimes { return &DispatchTimes{plans: map[int]*PlanTimes{}} }

// Plan is the times of the plan of tokens tokens with dispatches dispatches, made on
// first use.
func (t *DispatchTimes) Plan(tokens, dispatches int) *PlanTimes {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.plans[tokens]; ok {
		return p
	}
	p := &PlanTimes{Nanos: make([]atomic.Int64, dispatches)}
	t.plans[tokens] = p
	return p
}

// Of is the summed time of each dispatch of the plan of tokens tokens and its steps
// (nil, 0 where it did not run).
func (t *DispatchTimes) Of(tokens int) ([]time.Duration, int) {
	t.mu.Lock()
	p, ok := t.plans[tokens]
	t.mu.Unlock()
	if !ok {
		return nil, 0
	}
	out := make([]time.Duration, len(p.Nanos))
	for i := range p.Nanos {
		out[i] = time.Duration(p.Nanos[i].Load())
	}
	return out, int(p.Steps.Load())
}

// DispatchTimer is a Program that can time each of its dispatches: the CPU backend's, whose
// dispatches run one after another on the calling goroutine (a GPU's are queued to run
// later, where only the device could time them).
type DispatchTimer interface {
	// TimeDispatches adds each dispatch's wall time to t.Nanos (indexed as the plan's
	// dispatches) and each run to t.Steps, from the next Run on; nil stops it.
	TimeDispatches(t *PlanTimes)
}

// DispatchTimingBackend is a Backend whose programs are DispatchTimers.
type DispatchTimingBackend interface {
	TimesDispatches() bool
}

// TimeDispatches starts timing every dispatch of the model's plans, those loaded already
// and those loaded later, into t; nil stops it. It fails, timing nothing, where the
// backend's programs cannot time their dispatches.
func (m *Model) TimeDispatches(t *DispatchTimes) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errModelClosed
	}
	if b, ok := m.backend.(DispatchTimingBackend); !ok || !b.TimesDispatches() {
		return fmt.Errorf("the %s backend does not time its dispatches (the CPU backend does)", m.backend.Name())
	}
	m.timer = t
	for tokens, prog := range m.programs {
		m.attachTimer(tokens, prog)
	}
	return nil
}

// attachTimer hands prog its plan's part of m.timer (or nil); m.mu is held.
func (m *Model) attachTimer(tokens int, prog Program) {
	timer, ok := prog.(DispatchTimer)
	if !ok {
		return
	}
	if m.timer == nil {
		timer.TimeDispatches(nil)
		return
	}
	timer.TimeDispatches(m.timer.Plan(tokens, len(m.plans[tokens].Dispatches)))
}
