package passes

import (
	"fmt"
	"strings"

	"pistil/graph"
)

// rewriter is the machinery the fusion passes share. A pass matches patterns on the graph
// as it was when the pass began, appends one fused value per match, and records which old
// values the fused value's results replace and which it absorbs. finish redirects every
// use (args and graph outputs) to the replacements, deletes the old values nothing uses
// any more, and restores a topological order.
//
// The legality rule (ggml's, in one place): a value a fusion absorbs without replacing
// must have exactly one use, inside the pattern, so that no work is ever duplicated; a
// value it replaces may have any number of uses, since the fused op produces it too.
type rewriter struct {
	u       *Unit
	pass    string
	uses    []int
	users   [][]*graph.Value
	repl    map[*graph.Value]*graph.Value
	claimed map[*graph.Value]bool
}

func newRewriter(u *Unit, pass string) *rewriter {
	return &rewriter{u: u, pass: pass, uses: u.Graph.Uses(), users: u.Graph.Users(),
		repl: map[*graph.Value]*graph.Value{}, claimed: map[*graph.Value]bool{}}
}

// only reports whether v has exactly one use and no fusion of this pass has claimed it.
func (r *rewriter) only(v *graph.Value) bool {
	return r.free(v) && r.uses[v.ID] == 1
}

// free reports whether no fusion of this pass has claimed v yet.
func (r *rewriter) free(v *graph.Value) bool {
	return v.ID >= 0 && int(v.ID) < len(r.uses) && !r.claimed[v]
}

// is reports whether v is one of the ops.
func is(v *graph.Value, ops ...string) bool {
	for _, op := range ops {
		if v.Op == op {
			return true
		}
	}
	return false
}

// fuse appends op(args) {attrs} named name, with its type from the op table, and claims
// the absorbed values.
func (r *rewriter) fuse(rule, op, name string, attrs graph.Attrs, args []*graph.Value, absorbed ...*graph.Value) (*graph.Value, error) {
	def, ok := r.u.Ops.Lookup(op)
	if !ok {
		return nil, fmt.Errorf("%s rule %s: fused op %s is not in the op table", r.pass, rule, op)
	}
	args = append([]*graph.Value(nil), args...)
	probe := &graph.Value{ID: -1, Op: op, Args: args, Attrs: attrs, Name: name}
	t, err := def.Infer(probe)
	if err != nil {
		return nil, fmt.Errorf("%s rule %s on %s: %w", r.pass, rule, name, err)
	}
	for _, a := range absorbed {
		r.claimed[a] = true
	}
	r.u.count(r.pass+": "+rule, 1)
	return r.u.Graph.NewValue(op, t, attrs, name, args...), nil
}

// fuseInto fuses (as fuse does) and makes the fused value replace v: the whole rewrite
// of a pattern whose root is v and whose result has v's type.
func (r *rewriter) fuseInto(v *graph.Value, rule, op, name string, attrs graph.Attrs, args []*graph.Value, absorbed ...*graph.Value) error {
	fused, err := r.fuse(rule, op, name, attrs, args, absorbed...)
	if err != nil {
		return err
	}
	return r.replace(v, fused)
}

// elem appends select(index) of a fused tuple value.
func (r *rewriter) elem(t *graph.Value, index int, name string) *graph.Value {
	return r.u.Graph.NewValue(graph.OpSelect, t.Type.Elems[index], graph.Attrs{"index": int64(index)}, name, t)
}

// replace records that new computes old; the types must agree exactly.
func (r *rewriter) replace(old, new *graph.Value) error {
	if !old.Type.Equal(new.Type) {
		return fmt.Errorf("%s: %s (%s) would replace %s (%s) with another type %s", r.pass, new.Op, new.Name, old.Ref(), old.Op, new.Type)
	}
	r.claimed[old] = true
	r.repl[old] = new
	return nil
}

// finish applies the replacements, deletes what they made dead, and re-sorts.
func (r *rewriter) finish() {
	g := r.u.Graph
	if len(r.repl) == 0 && len(r.claimed) == 0 {
		return
	}
	for _, v := range g.Values {
		for i, a := range v.Args {
			if n, ok := r.repl[a]; ok {
				v.Args[i] = n
			}
		}
	}
	for i, o := range g.Outputs {
		if n, ok := r.repl[o.Value]; ok {
			g.Outputs[i].Value = n
		}
	}
	deleteDead(g, func(v *graph.Value) bool { return r.claimed[v] })
	topoSort(g)
}

// topoSort restores a topological order after fused values were appended at the end:
// every value is placed after its args, and otherwise where it was, so a fused value
// lands just before its first user.
func topoSort(g *graph.Graph) {
	placed := make(map[*graph.Value]bool, len(g.Values))
	order := make([]*graph.Value, 0, len(g.Values))
	var visit func(v *graph.Value)
	visit = func(v *graph.Value) {
		if placed[v] {
			return
		}
		placed[v] = true
		for _, a := range v.Args {
			visit(a)
		}
		order = append(order, v)
	}
	for _, v := range g.Values {
		visit(v)
	}
	g.Values = order
	g.Renumber()
}

// sibling names a fused value after one it replaces: the same module prefix with a new
// last component ("layers.0.linear_attn.g" → "layers.0.linear_attn.gates").
func sibling(name, last string) string {
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[:i+1] + last
	}
	return last
}
