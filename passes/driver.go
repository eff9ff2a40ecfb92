package passes

import (
	"fmt"
	"io"
	"time"

	"pistil/graph"
	"pistil/plan"
)

// Compile runs the pass table over a copy of g for one phase and returns the plan. The
// input graph is left unchanged, so one built graph serves every phase.
func Compile(g *graph.Graph, ops OpTable, phase Phase, cfg Config) (*plan.Plan, error) {
	if _, err := TargetFor(phase.Backend); err != nil {
		return nil, err
	}
	u := &Unit{Graph: g.Clone(), Phase: phase, Ops: ops}
	if err := Run(u, cfg, ""); err != nil {
		return nil, err
	}
	if u.Plan == nil {
		return nil, fmt.Errorf("compile %s: the lower pass did not run", phase.Name)
	}
	return u.Plan, nil
}

// Run runs the enabled passes on u in table order, stopping after the pass named until
// (the whole table when until is empty). It checks the input first when cfg.Check is set,
// then after every pass; a failure or a panic is reported with the pass's name.
func Run(u *Unit, cfg Config, until string) error {
	if until != "" {
		if _, ok := lookupPass(until); !ok {
			return fmt.Errorf("unknown pass %q (passes: %v)", until, PassNames())
		}
	}
	u.Config = cfg
	u.enabled = map[string]bool{}
	for _, p := range Passes {
		u.enabled[p.Name] = cfg.Enabled(p)
	}
	if cfg.Check {
		if err := CheckUnit(u); err != nil {
			return fmt.Errorf("input graph: %w", err)
		}
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	for seq, p := range Passes {
		if !cfg.Enabled(p) {
			if p.Name == until {
				break
			}
			continue
		}
		start := time.Now()
		if err := runPass(p, u); err != nil {
			return err
		}
		u.Ran = append(u.Ran, p.Name)
		if cfg.Time[p.Name] {
			fmt.Fprintf(log, "# %s %-17s %v\n", u.Phase.Name, p.Name, time.Since(start).Round(time.Microsecond))
		}
		if cfg.Check {
			if err := CheckUnit(u); err != nil {
				return fmt.Errorf("after pass %s: %w", p.Name, err)
			}
		}
		if cfg.Dump[p.Name] {
			text := Dump(u)
			if cfg.DumpTo != nil {
				if err := cfg.DumpTo(u.Phase.Name, seq, p.Name, text); err != nil {
					return fmt.Errorf("dump after %s: %w", p.Name, err)
				}
			} else {
				fmt.Fprintf(log, "# after %s (%s)\n%s", p.Name, u.Phase.Name, text)
			}
		}
		if p.Name == until {
			break
		}
	}
	return nil
}

// runPass runs one pass, turning a panic into an error that names the pass.
func runPass(p Pass, u *Unit) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic during pass %s (%s phase): %v", p.Name, u.Phase.Name, r)
		}
	}()
	if err := p.Fn(u); err != nil {
		return fmt.Errorf("pass %s (%s phase): %w", p.Name, u.Phase.Name, err)
	}
	return nil
}

// CheckUnit checks the graph and every analysis present: memory placements (no two live
// scratch values overlap) and the schedule (no group holds a conflict).
func CheckUnit(u *Unit) error {
	if err := graph.Check(u.Graph, u.Ops); err != nil {
		return err
	}
	if u.Memory != nil {
		if err := u.Memory.verify(u); err != nil {
			return fmt.Errorf("memory plan: %w", err)
		}
	}
	if u.Schedule != nil {
		if err := u.Schedule.verify(); err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
	}
	return nil
}
