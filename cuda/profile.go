//go:build linux

package cuda

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// Profile accumulates GPU time per op (and kernel) between CUDA events recorded around
// every launch. While one is active, programs launch kernel by kernel (no graph), so the
// numbers show where a step's time goes, not the graph's overlap.
type Profile struct {
	mu    sync.Mutex
	ms    map[string]float64
	calls map[string]int
	steps int
}

var activeProfile struct {
	sync.Mutex
	p *Profile
}

// StartProfile makes every program record per-launch times into a new Profile until
// StopProfile. PISTIL_CUDA_PROFILE=1 starts one at package init (the CLI then prints
// nothing by itself; tests and benchmarks print Profile.String).
func StartProfile() *Profile {
	p := &Profile{ms: map[string]float64{}, calls: map[string]int{}}
	activeProfile.Lock()
	activeProfile.p = p
	activeProfile.Unlock()
	return p
}

// StopProfile ends profiling; launches go back to graphs (when on).
func StopProfile() {
	activeProfile.Lock()
	activeProfile.p = nil
	activeProfile.Unlock()
}

func currentProfile() *Profile {
	activeProfile.Lock()
	defer activeProfile.Unlock()
	return activeProfile.p
}

func init() {
	if os.Getenv("PISTIL_CUDA_PROFILE") == "1" {
		StartProfile()
	}
}

func (p *Profile) add(key string, ms float64) {
	p.ms[key] += ms
	p.calls[key]++
}

// String is a table of the ops by total time, with their share and time per step.
func (p *Profile) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	type row struct {
		key string
		ms  float64
	}
	var rows []row
	var total float64
	for k, v := range p.ms {
		rows = append(rows, row{k, v})
		total += v
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ms > rows[j].ms })
	steps := max(p.steps, 1)
	var b strings.Builder
	fmt.Fprintf(&b, "%-32s %10s %7s %12s %8s\n", "op/kernel", "ms/step", "share", "launches/st", "us/launch")
	for _, r := range rows {
		calls := p.calls[r.key]
		fmt.Fprintf(&b, "%-32s %10.3f %6.1f%% %12.1f %8.1f\n", r.key, r.ms/float64(steps), 100*r.ms/total,
			float64(calls)/float64(steps), 1000*r.ms/float64(calls))
	}
	fmt.Fprintf(&b, "%-32s %10.3f (kernel time only, %d steps)\n", "total", total/float64(steps), p.steps)
	return b.String()
}

// runProfiled launches every kernel with an event before it and one after the last,
// then attributes the elapsed times (the caller holds the device).
func (p *program) runProfiled(prof *Profile) error { return p.runProfiledLaunches(prof, p.launches) }

// runProfiledLaunches runs launches (the plan's, lowered against one of the step slots)
// one by one between events and adds their times to prof.
func (p *program) runProfiledLaunches(prof *Profile, launches []*launch) error {
	g := p.b.dev
	for len(p.events) < len(launches)+1 {
		var e uintptr
		if err := g.d.check("cuEventCreate", g.d.cuEventCreate(&e, 0)); err != nil {
			return err
		}
		p.events = append(p.events, e)
	}
	for i, l := range launches {
		if err := g.d.check("cuEventRecord", g.d.cuEventRecord(p.events[i], g.stream)); err != nil {
			return err
		}
		if err := g.run(l); err != nil {
			return err
		}
	}
	last := p.events[len(launches)]
	if err := g.d.check("cuEventRecord", g.d.cuEventRecord(last, g.stream)); err != nil {
		return err
	}
	if err := g.d.check("cuEventSynchronize", g.d.cuEventSynchronize(last)); err != nil {
		return err
	}
	prof.mu.Lock()
	defer prof.mu.Unlock()
	for i, l := range launches {
		var ms float32
		if err := g.d.check("cuEventElapsedTime", g.d.cuEventElapsedTime(&ms, p.events[i], p.events[i+1])); err != nil {
			return err
		}
		prof.add(p.ops[i]+" ("+l.name+")", float64(ms))
	}
	prof.steps++
	return nil
}
