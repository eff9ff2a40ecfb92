package passes

import (
	"fmt"
	"sort"

	"pistil/graph"
	"pistil/plan"
)

// Access is one dispatch's byte-range footprint.
type Access struct {
	Value  *graph.Value // the value the dispatch computes (nil in hand-made tests)
	Op     string
	Reads  []plan.Range
	Writes []plan.Range
}

// Schedule is the concurrency analysis of a phase.
type Schedule struct {
	Dispatches []Access
	// Groups partition Dispatches in order; a barrier precedes every group but the first
	// and records why.
	Groups []plan.Group
	// Edges is the transitive reduction of the conflict relation.
	Edges []plan.Edge
	// Depth is each dispatch's position on the longest dependency path ending at it
	// (1 for a dispatch with no predecessor); LongestChain is the largest.
	Depth        []int
	LongestChain int
	bufName      func(int) string
}

// schedule computes every dispatch's read and write ranges from the memory plan, then
// groups and orders them (see Analyse).
func schedule(u *Unit) error {
	if u.Memory == nil {
		return fmt.Errorf("no memory plan: plan-memory must run first")
	}
	m := u.Memory
	var acc []Access
	for _, v := range u.Graph.Values {
		def, _ := u.Ops.Lookup(v.Op)
		if def.Has(graph.Source) || def.Has(graph.View) {
			continue
		}
		a := Access{Value: v, Op: v.Op}
		for _, arg := range v.Args {
			a.Reads = append(a.Reads, operandRange(m, m.Place[arg.ID][0]))
		}
		for _, p := range m.Place[v.ID] {
			a.Writes = append(a.Writes, operandRange(m, p))
		}
		acc = append(acc, a)
	}
	name := func(id int) string { return m.Buffers[id].Name }
	u.Schedule = Analyse(acc, name)
	return nil
}

// operandRange is the bytes an operand covers; accesses to a buffer sized by the context
// capacity (the KV cache) whose extent depends on the step cover the whole buffer.
func operandRange(m *Memory, o plan.Operand) plan.Range {
	buf := m.Buffers[o.Buffer]
	if buf.PerN != 0 || o.Type.HasSym(graph.SymN) || o.Type.HasSym(graph.SymC) {
		return plan.Range{Buffer: o.Buffer, Off: 0, End: plan.ToEnd}
	}
	return plan.Range{Buffer: o.Buffer, Off: o.Offset, End: o.Offset + o.Type.Bytes(graph.Bindings{})}
}

// conflict describes why dispatch b must wait for dispatch a.
type conflict struct {
	kind  string // RAW, WAR or WAW
	a, b  int
	rng   plan.Range // the earlier dispatch's range
	other plan.Range // the later dispatch's range
}

// firstConflict finds a conflict of b with a: b reads what a writes (RAW), writes what a
// writes (WAW) or writes what a reads (WAR). Reads never conflict with reads.
func firstConflict(acc []Access, a, b int) (conflict, bool) {
	for _, r := range acc[b].Reads {
		for _, w := range acc[a].Writes {
			if r.Overlaps(w) {
				return conflict{"RAW", a, b, w, r}, true
			}
		}
	}
	for _, w := range acc[b].Writes {
		for _, w0 := range acc[a].Writes {
			if w.Overlaps(w0) {
				return conflict{"WAW", a, b, w0, w}, true
			}
		}
		for _, r := range acc[a].Reads {
			if w.Overlaps(r) {
				return conflict{"WAR", a, b, r, w}, true
			}
		}
	}
	return conflict{}, false
}

// Analyse groups dispatches and builds the dependency DAG from their byte ranges alone
// (ggml's rule, DESIGN.md convention 4):
//   - in order, a dispatch joins the open concurrent group unless it reads a range a
//     member writes, writes a range a member writes, or writes a range a member reads;
//     then a barrier closes the group, recording the first conflict as its reason;
//   - every conflicting earlier dispatch is a predecessor; Edges keeps only the edges no
//     longer path implies (transitive reduction), which is what a CUDA graph needs;
//   - the longest path, counted in dispatches, is the number of sequential stages a
//     perfect scheduler still needs.
func Analyse(acc []Access, bufName func(int) string) *Schedule {
	s := &Schedule{Dispatches: acc, bufName: bufName, Depth: make([]int, len(acc))}
	describe := func(c conflict) string {
		what := map[string]string{"RAW": "reads", "WAW": "writes", "WAR": "writes"}[c.kind]
		done := map[string]string{"RAW": "written by", "WAW": "written by", "WAR": "read by"}[c.kind]
		return fmt.Sprintf("%s: d%d %s %s %s %s d%d %s", c.kind, c.b, acc[c.b].Op, what,
			c.other.Format(bufName(c.other.Buffer)), done, c.a, acc[c.a].Op)
	}
	first := 0
	for d := range acc {
		for m := first; m < d; m++ {
			if c, ok := firstConflict(acc, m, d); ok {
				s.Groups[len(s.Groups)-1].Last = d - 1
				s.Groups = append(s.Groups, plan.Group{First: d, Barrier: describe(c)})
				first = d
				break
			}
		}
		if d == 0 {
			s.Groups = append(s.Groups, plan.Group{First: 0})
		}
	}
	if len(s.Groups) > 0 {
		s.Groups[len(s.Groups)-1].Last = len(acc) - 1
	}
	s.Edges, s.Depth = reduce(acc)
	for _, d := range s.Depth {
		s.LongestChain = max(s.LongestChain, d)
	}
	return s
}

// reduce finds every conflict predecessor per dispatch, then keeps an edge p→d only if
// no other predecessor of d already reaches p.
func reduce(acc []Access) ([]plan.Edge, []int) {
	n := len(acc)
	type access struct {
		d     int
		r     plan.Range
		write bool
	}
	byBuf := map[int][]access{}
	reach := make([]bitset, n)
	depth := make([]int, n)
	var edges []plan.Edge
	mark := make([]int, n)
	for i := range mark {
		mark[i] = -1
	}
	for d := range acc {
		var preds []int
		add := func(p int) {
			if mark[p] != d {
				mark[p] = d
				preds = append(preds, p)
			}
		}
		for _, r := range acc[d].Reads {
			for _, a := range byBuf[r.Buffer] {
				if a.write && a.r.Overlaps(r) {
					add(a.d)
				}
			}
		}
		for _, w := range acc[d].Writes {
			for _, a := range byBuf[w.Buffer] {
				if a.r.Overlaps(w) {
					add(a.d)
				}
			}
		}
		sort.Sort(sort.Reverse(sort.IntSlice(preds)))
		reach[d] = newBitset(n)
		covered := newBitset(n)
		depth[d] = 1
		for _, p := range preds {
			depth[d] = max(depth[d], depth[p]+1)
			if !covered.has(p) {
				edges = append(edges, plan.Edge{From: p, To: d})
				covered.or(reach[p])
			}
			reach[d].or(reach[p])
			reach[d].set(p)
		}
		for _, r := range acc[d].Reads {
			byBuf[r.Buffer] = append(byBuf[r.Buffer], access{d, r, false})
		}
		for _, w := range acc[d].Writes {
			byBuf[w.Buffer] = append(byBuf[w.Buffer], access{d, w, true})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].To != edges[j].To {
			return edges[i].To < edges[j].To
		}
		return edges[i].From < edges[j].From
	})
	return edges, depth
}

// verify re-derives the invariants: groups partition the dispatches in order, no group
// holds two conflicting dispatches, and every edge points forward.
func (s *Schedule) verify() error {
	next := 0
	for gi, g := range s.Groups {
		if g.First != next || g.Last < g.First {
			return fmt.Errorf("group %d covers d%d..d%d, expected to start at d%d", gi, g.First, g.Last, next)
		}
		for a := g.First; a <= g.Last; a++ {
			for b := a + 1; b <= g.Last; b++ {
				if c, ok := firstConflict(s.Dispatches, a, b); ok {
					return fmt.Errorf("group %d holds d%d and d%d, which conflict (%s)", gi, a, b, c.kind)
				}
			}
		}
		next = g.Last + 1
	}
	if next != len(s.Dispatches) {
		return fmt.Errorf("groups cover %d of %d dispatches", next, len(s.Dispatches))
	}
	for _, e := range s.Edges {
		if e.From >= e.To {
			return fmt.Errorf("edge d%d -> d%d points backwards", e.From, e.To)
		}
	}
	return nil
}
