package passes

import (
	"fmt"
	"sort"

	"pistil/graph"
	"pistil/ops"
	"pistil/plan"
)

// Align is the byte alignment of every scratch and output placement (a Metal and CUDA
// friendly boundary; it also keeps float4 loads aligned).
const Align = 256

// Memory is where every value lives once plan-memory has run.
type Memory struct {
	// Buffers: the scratch arena first (ID 0), then one buffer per weight, state and
	// input source in graph order, then one per non-state output in output order.
	Buffers []plan.Buffer
	// Place has, for each value ID, one operand per result element (one for a tensor
	// result). Views share their argument's bytes.
	Place [][]plan.Operand
	// allocs are the arena placements with their live ranges (value indexes), for the
	// verifier and dumps.
	allocs []alloc
}

type alloc struct {
	value     graph.ID
	elem      int
	off, end  int64
	def, last int // live from the defining value to its last reader, inclusive
}

// ArenaBytes is the scratch arena's size.
func (m *Memory) ArenaBytes() int64 { return m.Buffers[0].Bytes }

// elemRef names one element of a value's result.
type elemRef struct {
	v    *graph.Value
	elem int
}

// planMemory gives every value bytes:
//   - weights, states and inputs get a buffer each, bound by name at run time;
//   - a StateUpdate op writes its updated state in place, into the buffer of the state it
//     updates (graph.Check guarantees every other read of the old version comes first);
//   - a graph output that is not state gets its own output buffer, which the value that
//     computes it writes directly;
//   - views (reshape, select, last_row, slice_view) alias their argument at an offset;
//   - everything else goes into one scratch arena, packed by liveness with first fit.
//
// Reusing a freed block makes the new writer wait for every dispatch that touched the
// block (a WAR or WAW edge). A block is preferred for reuse only when each of those
// dispatches sits on an earlier as-late-as-possible level than the writer: then no
// dependency path grows (a path through the new edge is at most the earlier dispatch's
// earliest depth plus the writer's remaining height, which is at most the longest chain),
// and after reorder the two are in different groups, so the reuse costs no stage and no
// barrier. Other reuse is taken only when the arena would otherwise pass twice its
// liveness-only size; the dump's stat counts it.
func planMemory(u *Unit) error {
	g := u.Graph
	bind := graph.Bindings{T: u.Phase.Tokens}
	m := &Memory{Place: make([][]plan.Operand, len(g.Values))}
	m.Buffers = append(m.Buffers, plan.Buffer{ID: 0, Kind: plan.Scratch, Name: "arena"})
	_, stateArg, err := graph.StateVersions(g, u.Ops)
	if err != nil {
		return err
	}
	// Sources get their buffers.
	for _, v := range g.Values {
		var kind plan.BufferKind
		switch v.Op {
		case graph.OpWeight:
			kind = plan.Weight
		case graph.OpState:
			kind = plan.State
		case graph.OpInput:
			kind = plan.Input
		default:
			continue
		}
		buf := plan.Buffer{ID: len(m.Buffers), Kind: kind, Name: v.Name, Type: v.Type}
		buf.Bytes, buf.PerN = bytesPerN(v.Type, bind)
		m.Buffers = append(m.Buffers, buf)
		m.Place[v.ID] = []plan.Operand{{Buffer: buf.ID, Type: v.Type}}
	}
	outputElem, err := placeOutputs(u, m, stateArg, bind)
	if err != nil {
		return err
	}
	readers, err := readersOf(u, bind)
	if err != nil {
		return err
	}
	var reqs []request
	for i, v := range g.Values {
		if m.Place[v.ID] != nil {
			continue
		}
		if def, _ := u.Ops.Lookup(v.Op); def.Has(graph.View) {
			continue // placed once the arena offsets are known
		}
		n := 1
		if v.Type.IsTuple() {
			n = len(v.Type.Elems)
		}
		places := make([]plan.Operand, n)
		for e := 0; e < n; e++ {
			ref := elemRef{v, e}
			t := elemType(ref)
			if isStateElem(ref, stateArg) {
				sp := m.Place[v.Args[stateArg[v.ID]].ID][0]
				if !sp.Type.Equal(t) {
					return fmt.Errorf("%s (%s) updates state of type %s into a result of type %s: in place needs equal types", v.Ref(), v.Op, sp.Type, t)
				}
				places[e] = sp
				continue
			}
			if buf, ok := outputElem[ref]; ok {
				places[e] = plan.Operand{Buffer: buf, Type: t}
				continue
			}
			if t.HasSym(graph.SymC) || t.HasSym(graph.SymN) || t.HasSym(graph.SymT) {
				return fmt.Errorf("%s (%s) result %s: scratch values need a size fixed at compile time", v.Ref(), v.Op, t)
			}
			last := i
			for _, r := range readers[ref] {
				last = max(last, r)
			}
			places[e] = plan.Operand{Buffer: 0, Type: t} // offset filled in below
			reqs = append(reqs, request{value: v.ID, elem: e, def: i, last: last,
				size: t.Bytes(bind), accessors: append([]int{i}, readers[ref]...)})
		}
		m.Place[v.ID] = places
	}
	// Plain liveness packing first gives the baseline arena; the second packing may spend
	// up to twice that to keep every reuse harmless to the schedule.
	level, _, err := alapLevels(u)
	if err != nil {
		return err
	}
	_, baseline, _ := pack(reqs, level, 0)
	offsets, high, hazards := pack(reqs, level, 2*baseline)
	for k, r := range reqs {
		m.Place[r.value][r.elem].Offset = offsets[k]
		m.allocs = append(m.allocs, alloc{value: r.value, elem: r.elem, off: offsets[k], end: offsets[k] + r.size, def: r.def, last: r.last})
	}
	for _, v := range g.Values {
		if def, _ := u.Ops.Lookup(v.Op); def.Has(graph.View) {
			p, err := viewPlace(u, v, m, bind)
			if err != nil {
				return err
			}
			m.Place[v.ID] = []plan.Operand{p}
		}
	}
	u.count("plan-memory: reuse that may cost a stage", hazards)
	m.Buffers[0].Bytes = high
	u.count("plan-memory: arena placements", len(m.allocs))
	u.Memory = m
	return nil
}

// placeOutputs gives every graph output that is not state its own output buffer, which
// the element computing it will write directly. It returns the buffer of each such
// element.
func placeOutputs(u *Unit, m *Memory, stateArg []int, bind graph.Bindings) (map[elemRef]int, error) {
	outputElem := map[elemRef]int{}
	for _, o := range u.Graph.Outputs {
		root, off, err := storageRoot(u, o.Value, bind)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", o.Name, err)
		}
		if m.Place[root.v.ID] != nil || isStateElem(root, stateArg) {
			continue // a source (state versions live in their state buffer)
		}
		if off != 0 {
			return nil, fmt.Errorf("output %s is a view at byte %d of %s: outputs must start their storage", o.Name, off, root.v.Ref())
		}
		if _, dup := outputElem[root]; dup {
			return nil, fmt.Errorf("output %s shares its storage with another output: give each output its own value", o.Name)
		}
		t := elemType(root)
		if t.HasSym(graph.SymC) || t.HasSym(graph.SymN) || t.HasSym(graph.SymT) {
			return nil, fmt.Errorf("output %s has type %s: outputs need a fixed size", o.Name, t)
		}
		buf := plan.Buffer{ID: len(m.Buffers), Kind: plan.Output, Name: o.Name, Type: t, Bytes: t.Bytes(bind)}
		m.Buffers = append(m.Buffers, buf)
		outputElem[root] = buf.ID
	}
	return outputElem, nil
}

// readersOf lists, for each result element, the dispatching values that read it
// directly or through views (by list index): its liveness.
func readersOf(u *Unit, bind graph.Bindings) (map[elemRef][]int, error) {
	readers := map[elemRef][]int{}
	for i, v := range u.Graph.Values {
		if def, _ := u.Ops.Lookup(v.Op); def.Has(graph.Source) || def.Has(graph.View) {
			continue
		}
		for _, a := range v.Args {
			r, _, err := storageRoot(u, a, bind)
			if err != nil {
				return nil, fmt.Errorf("%s arg %s: %w", v.Ref(), a.Ref(), err)
			}
			readers[r] = append(readers[r], i)
		}
	}
	return readers, nil
}

func elemType(r elemRef) graph.Type {
	if r.v.Type.IsTuple() {
		return r.v.Type.Elems[r.elem]
	}
	return r.v.Type
}

// isStateElem reports whether r is the updated-state element of a StateUpdate op: its
// whole result, or the last element of its tuple (the op table's convention).
func isStateElem(r elemRef, stateArg []int) bool {
	if stateArg[r.v.ID] < 0 {
		return false
	}
	return !r.v.Type.IsTuple() || r.elem == len(r.v.Type.Elems)-1
}

// storageRoot follows views to the element whose bytes v shares, and the byte offset of v
// inside it.
func storageRoot(u *Unit, v *graph.Value, bind graph.Bindings) (elemRef, int64, error) {
	var off int64
	for {
		def, ok := u.Ops.Lookup(v.Op)
		if !ok || !def.Has(graph.View) {
			return elemRef{v, 0}, off, nil
		}
		a := v.Args[0]
		if v.Op == graph.OpSelect {
			if def, _ := u.Ops.Lookup(a.Op); def != nil && def.Has(graph.View) {
				return elemRef{}, 0, fmt.Errorf("%s selects from view %s", v.Ref(), a.Ref())
			}
			return elemRef{a, v.Attrs.Int("index")}, off, nil
		}
		o, ok := viewOffset(v, bind)
		if !ok {
			return elemRef{}, 0, fmt.Errorf("%s: the memory planner does not know view op %s", v.Ref(), v.Op)
		}
		off += o
		v = a
	}
}

// viewOffset is the byte offset of a view of one tensor (reshape, last_row, slice_view)
// inside its argument; false for any other op (select, which picks a tuple element, is
// placed by element instead).
func viewOffset(v *graph.Value, bind graph.Bindings) (int64, bool) {
	a := v.Args[0]
	switch v.Op {
	case "reshape":
		return 0, true
	case "last_row":
		rows := int64(a.Type.Shape[0].Eval(bind))
		return (rows - 1) * (a.Type.Bytes(bind) / max(rows, 1)), true
	case "slice_view":
		return ops.SliceViewOffset(a.Type, int(v.Attrs.Int("axis")), int(v.Attrs.Int("start")), bind), true
	}
	return 0, false
}

// viewPlace places a view on its argument's bytes.
func viewPlace(u *Unit, v *graph.Value, m *Memory, bind graph.Bindings) (plan.Operand, error) {
	a := v.Args[0]
	base := m.Place[a.ID]
	if base == nil {
		return plan.Operand{}, fmt.Errorf("%s (%s): argument %s has no placement", v.Ref(), v.Op, a.Ref())
	}
	if v.Op == graph.OpSelect {
		i := v.Attrs.Int("index")
		if i < 0 || i >= len(base) {
			return plan.Operand{}, fmt.Errorf("%s selects element %d of %s, which has %d", v.Ref(), i, a.Ref(), len(base))
		}
		return plan.Operand{Buffer: base[i].Buffer, Offset: base[i].Offset, Type: v.Type}, nil
	}
	off, ok := viewOffset(v, bind)
	if !ok {
		return plan.Operand{}, fmt.Errorf("%s: the memory planner does not know view op %s", v.Ref(), v.Op)
	}
	return plan.Operand{Buffer: base[0].Buffer, Offset: base[0].Offset + off, Type: v.Type}, nil
}

// bytesPerN splits a size that may grow with the context capacity N into its fixed part
// and its per-N part (sizes are linear in N: one dimension carries it).
func bytesPerN(t graph.Type, bind graph.Bindings) (fixed, perN int64) {
	b0 := bind
	b0.N = 0
	b1 := bind
	b1.N = 1
	fixed = t.Bytes(b0)
	if t.HasSym(graph.SymN) {
		perN = t.Bytes(b1) - fixed
	}
	return fixed, perN
}

// bitset is a dense set of small integers (dispatch indexes in the DAG reduction).
type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i int) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) or(o bitset) {
	for i := range o {
		b[i] |= o[i]
	}
}
func alignUp(n int64) int64              { return (n + Align - 1) / Align * Align }
func overlaps(a0, a1, b0, b1 int64) bool { return a0 < b1 && b0 < a1 }

// packer is a first-fit arena allocator over live and recently freed blocks.
type packer struct {
	live []block
	dead []block
	high int64
}

type block struct {
	off, end  int64
	accessors []int // values that wrote or read it
}

// request is one arena placement to make: an element written by value def and read up
// to value last.
type request struct {
	value     graph.ID
	elem      int
	def, last int
	size      int64
	accessors []int
}

// pack places reqs (in definition order) and returns their offsets, the arena size and
// the number of reuses not ordered by data flow. With budget 0 it packs by liveness
// alone; otherwise it prefers ordered reuse while the arena stays within budget.
func pack(reqs []request, level []int, budget int64) ([]int64, int64, int) {
	p := packer{}
	offsets := make([]int64, len(reqs))
	hazards := 0
	for k, r := range reqs {
		if k == 0 || reqs[k-1].def != r.def {
			p.retire(r.def - 1) // blocks whose last reader came before this value are free
		}
		var off int64
		var hazard bool
		if budget == 0 {
			off = firstFit(append([]block(nil), p.live...), r.size)
		} else {
			off, hazard = p.choose(r.size, r.def, level, budget)
		}
		if hazard {
			hazards++
		}
		offsets[k] = p.take(off, r.size, r.accessors)
	}
	return offsets, p.high, hazards
}

// choose returns an offset for size bytes written by value i: the first fit that avoids
// live blocks and freed blocks touched by a dispatch on i's level or later, unless that
// passes the budget; then the first fit among live blocks only, and hazard reports
// whether that reuses a freed block.
func (p *packer) choose(size int64, i int, level []int, budget int64) (int64, bool) {
	blocking := append([]block(nil), p.live...)
	for _, d := range p.dead {
		for _, a := range d.accessors {
			if level[a] >= level[i] {
				blocking = append(blocking, d)
				break
			}
		}
	}
	ordered := firstFit(blocking, size)
	plain := firstFit(append([]block(nil), p.live...), size)
	if ordered+size <= max(budget, plain+size) {
		return ordered, false
	}
	hazard := false
	for _, d := range p.dead {
		hazard = hazard || overlaps(plain, plain+size, d.off, d.end)
	}
	return plain, hazard
}

func (p *packer) take(off, size int64, accessors []int) int64 {
	p.live = append(p.live, block{off: off, end: off + size, accessors: accessors})
	p.high = max(p.high, off+size)
	return off
}

// retire frees the blocks whose last reader is value i.
func (p *packer) retire(i int) {
	kept := p.live[:0]
	for _, b := range p.live {
		last := b.accessors[0]
		for _, a := range b.accessors {
			last = max(last, a)
		}
		if last <= i {
			p.dead = append(p.dead, b)
			continue
		}
		kept = append(kept, b)
	}
	p.live = kept
}

func firstFit(blocks []block, size int64) int64 {
	sort.Slice(blocks, func(a, b int) bool { return blocks[a].off < blocks[b].off })
	var cursor int64
	for _, b := range blocks {
		if alignUp(cursor)+size <= b.off {
			break
		}
		cursor = max(cursor, b.end)
	}
	return alignUp(cursor)
}

// verify checks that no two arena values that are live at the same time share bytes, and
// that every value has a placement.
func (m *Memory) verify(u *Unit) error {
	if len(m.Place) != len(u.Graph.Values) {
		return fmt.Errorf("placements for %d values, graph has %d (the graph changed after plan-memory)", len(m.Place), len(u.Graph.Values))
	}
	bind := graph.Bindings{T: u.Phase.Tokens}
	for i, p := range m.Place {
		if p == nil {
			return fmt.Errorf("v%d has no placement", i)
		}
		v := u.Graph.Values[i]
		if def, _ := u.Ops.Lookup(v.Op); def.Has(graph.View) {
			want, err := viewPlace(u, v, m, bind)
			if err != nil {
				return err
			}
			if p[0].Buffer != want.Buffer || p[0].Offset != want.Offset || !p[0].Type.Equal(want.Type) {
				return fmt.Errorf("view %s is placed at %+v but its argument gives %+v", v.Ref(), p[0], want)
			}
		}
	}
	as := append([]alloc(nil), m.allocs...)
	sort.Slice(as, func(a, b int) bool { return as[a].off < as[b].off })
	for i := range as {
		a := as[i]
		if a.off%Align != 0 || a.end > m.ArenaBytes() {
			return fmt.Errorf("v%d element %d at [%d,%d) is misaligned or outside the %d-byte arena", a.value, a.elem, a.off, a.end, m.ArenaBytes())
		}
		for j := i + 1; j < len(as) && as[j].off < a.end; j++ {
			b := as[j]
			if a.def <= b.last && b.def <= a.last {
				return fmt.Errorf("v%d [%d,%d) live %d..%d overlaps v%d [%d,%d) live %d..%d", a.value, a.off, a.end, a.def, a.last, b.value, b.off, b.end, b.def, b.last)
			}
		}
	}
	return nil
}
