package passes

import (
	"fmt"
	"strings"
	"testing"

	"pistil/plan"
)

func rng(buf int, off, end int64) plan.Range { return plan.Range{Buffer: buf, Off: off, End: end} }

func access(op string, reads, writes []plan.Range) Access {
	return Access{Op: op, Reads: reads, Writes: writes}
}

func bufName(id int) string { return fmt.Sprintf("buf%d", id) }

// groupsOf renders the grouping as "d0 d1 | d2" for compact expectations.
func groupsOf(s *Schedule) string {
	var parts []string
	for _, g := range s.Groups {
		var ids []string
		for d := g.First; d <= g.Last; d++ {
			ids = append(ids, fmt.Sprintf("d%d", d))
		}
		parts = append(parts, strings.Join(ids, " "))
	}
	return strings.Join(parts, " | ")
}

func TestScheduleBarriers(t *testing.T) {
	const w, a = 1, 0 // buffer 1 is a weight (read only), buffer 0 the arena
	cases := []struct {
		name       string
		acc        []Access
		groups     string
		barrierHas string
	}{
		{"independent dispatches share a group", []Access{
			access("matmul", []plan.Range{rng(a, 0, 64), rng(w, 0, 1000)}, []plan.Range{rng(a, 64, 128)}),
			access("matmul", []plan.Range{rng(a, 0, 64), rng(w, 1000, 2000)}, []plan.Range{rng(a, 128, 192)}),
			access("matmul", []plan.Range{rng(a, 0, 64), rng(w, 0, 1000)}, []plan.Range{rng(a, 192, 256)}),
		}, "d0 d1 d2", ""},
		{"read after write", []Access{
			access("embed", nil, []plan.Range{rng(a, 0, 64)}),
			access("rms_norm", []plan.Range{rng(a, 32, 96)}, []plan.Range{rng(a, 128, 192)}),
		}, "d0 | d1", "RAW: d1 rms_norm reads buf0[32,96) written by d0 embed"},
		{"write after read", []Access{
			access("add", []plan.Range{rng(a, 0, 64)}, []plan.Range{rng(a, 64, 128)}),
			access("silu", []plan.Range{rng(a, 256, 320)}, []plan.Range{rng(a, 0, 8)}),
		}, "d0 | d1", "WAR: d1 silu writes buf0[0,8) read by d0 add"},
		{"write after write", []Access{
			access("add", nil, []plan.Range{rng(a, 0, 64)}),
			access("mul", nil, []plan.Range{rng(a, 60, 70)}),
		}, "d0 | d1", "WAW: d1 mul writes buf0[60,70) written by d0 add"},
		{"disjoint ranges of one buffer do not conflict", []Access{
			access("add", []plan.Range{rng(a, 0, 64)}, []plan.Range{rng(a, 64, 128)}),
			access("mul", []plan.Range{rng(a, 0, 64)}, []plan.Range{rng(a, 128, 192)}),
			access("exp", []plan.Range{rng(a, 192, 256)}, []plan.Range{rng(a, 256, 320)}),
		}, "d0 d1 d2", ""},
		{"adjacent ranges touch but do not overlap", []Access{
			access("add", nil, []plan.Range{rng(a, 0, 64)}),
			access("mul", []plan.Range{rng(a, 64, 128)}, []plan.Range{rng(a, 128, 192)}),
		}, "d0 d1", ""},
		{"same range in another buffer does not conflict", []Access{
			access("add", nil, []plan.Range{rng(2, 0, 64)}),
			access("mul", []plan.Range{rng(3, 0, 64)}, []plan.Range{rng(a, 0, 64)}),
		}, "d0 d1", ""},
		{"a to-end range conflicts with any later offset", []Access{
			access("kv_append", []plan.Range{rng(a, 0, 64)}, []plan.Range{rng(2, 0, plan.ToEnd)}),
			access("attention", []plan.Range{rng(2, 1<<40, 1<<40+8)}, []plan.Range{rng(a, 64, 128)}),
		}, "d0 | d1", "RAW: d1 attention reads buf2[1099511627776,1099511627784) written by d0 kv_append"},
		{"a conflict with an earlier group does not close the open one", []Access{
			access("embed", nil, []plan.Range{rng(a, 0, 64)}),
			access("norm", []plan.Range{rng(a, 0, 64)}, []plan.Range{rng(a, 64, 128)}),
			access("mm1", []plan.Range{rng(a, 64, 128)}, []plan.Range{rng(a, 128, 192)}),
			access("mm2", []plan.Range{rng(a, 0, 64), rng(a, 64, 128)}, []plan.Range{rng(a, 192, 256)}),
		}, "d0 | d1 | d2 d3", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Analyse(c.acc, bufName)
			if got := groupsOf(s); got != c.groups {
				t.Errorf("groups %q, want %q", got, c.groups)
			}
			if c.barrierHas != "" {
				found := false
				for _, g := range s.Groups {
					found = found || g.Barrier == c.barrierHas
				}
				if !found {
					t.Errorf("no barrier with reason %q in %+v", c.barrierHas, s.Groups)
				}
			}
			if err := s.verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestScheduleTransitiveReduction(t *testing.T) {
	const a = 0
	// d0 writes x; d1 reads x writes y; d2 reads x and y writes z; d3 independent.
	acc := []Access{
		access("p", nil, []plan.Range{rng(a, 0, 8)}),
		access("q", []plan.Range{rng(a, 0, 8)}, []plan.Range{rng(a, 8, 16)}),
		access("r", []plan.Range{rng(a, 0, 8), rng(a, 8, 16)}, []plan.Range{rng(a, 16, 24)}),
		access("s", nil, []plan.Range{rng(a, 100, 108)}),
	}
	s := Analyse(acc, bufName)
	want := []plan.Edge{{From: 0, To: 1}, {From: 1, To: 2}} // 0→2 is implied by 0→1→2
	if fmt.Sprint(s.Edges) != fmt.Sprint(want) {
		t.Errorf("edges %v, want %v", s.Edges, want)
	}
	if s.LongestChain != 3 {
		t.Errorf("longest chain %d, want 3", s.LongestChain)
	}
	if got := plan.LongestChain(len(acc), s.Edges); got != 3 {
		t.Errorf("plan.LongestChain from reduced edges = %d, want 3", got)
	}
	// d3 conflicts with nothing, but list-order grouping still places it after r's barrier.
	if got := groupsOf(s); got != "d0 | d1 | d2 d3" {
		t.Errorf("groups %q", got)
	}
}

func TestScheduleWARAndWAWEdges(t *testing.T) {
	const a = 0
	acc := []Access{
		access("reader", []plan.Range{rng(a, 0, 8)}, []plan.Range{rng(a, 64, 72)}),
		access("writer", nil, []plan.Range{rng(a, 0, 8)}),   // WAR on d0
		access("writer2", nil, []plan.Range{rng(a, 4, 12)}), // WAW on d1
	}
	s := Analyse(acc, bufName)
	want := []plan.Edge{{From: 0, To: 1}, {From: 1, To: 2}}
	if fmt.Sprint(s.Edges) != fmt.Sprint(want) {
		t.Errorf("edges %v, want %v", s.Edges, want)
	}
}
