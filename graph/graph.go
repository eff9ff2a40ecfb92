package graph

import (
	"fmt"
	"sort"
)

// ID is a value's dense index in its graph. IDs are assigned in creation order and never
// reused, so dumps are stable and analyses can use slices indexed by ID.
type ID int32

// Value is one node of the graph: the result of applying Op to Args with Attrs.
//
// Name carries the binding of source values: the canonical weight name of a "weight"
// value (see models/qwen35moe), the state name of a "state" value, the input name of an
// "input" value. For other values it is an optional debug label.
type Value struct {
	ID    ID
	Op    string
	Type  Type
	Args  []*Value
	Attrs Attrs
	Name  string
}

// Ref is how values are written in the text format: v12.
func (v *Value) Ref() string { return fmt.Sprintf("v%d", v.ID) }

// Graph is a list of values in topological order (every arg precedes its user) plus the
// values the graph produces.
//
// Side effects are edges: an op that updates session state (KV-cache append, conv-state
// shift, recurrent-state update) takes the state value as an argument and returns the
// updated state as (part of) its result; later readers use the updated value. Outputs
// names the values that must be computed: the logits and every final state version.
type Graph struct {
	Name    string
	Values  []*Value
	Outputs []Output
}

// Output is a named graph result. For state outputs the name is the state's name: the
// runtime writes the value back into that state buffer (memory planning makes the update
// in place so that the write-back is free).
type Output struct {
	Name  string
	Value *Value
}

// New returns an empty graph.
func New(name string) *Graph { return &Graph{Name: name} }

// NewValue appends a value. Callers normally use a Builder, which infers the type.
func (g *Graph) NewValue(op string, t Type, attrs Attrs, name string, args ...*Value) *Value {
	v := &Value{ID: ID(len(g.Values)), Op: op, Type: t, Args: args, Attrs: attrs, Name: name}
	g.Values = append(g.Values, v)
	return v
}

// AddOutput marks v as a graph result under name.
func (g *Graph) AddOutput(name string, v *Value) { g.Outputs = append(g.Outputs, Output{name, v}) }

// Output returns the output named name, or nil.
func (g *Graph) Output(name string) *Value {
	for _, o := range g.Outputs {
		if o.Name == name {
			return o.Value
		}
	}
	return nil
}

// Renumber reassigns dense IDs in list order. Passes that delete or reorder values call it
// before returning so that IDs stay dense and dumps stay stable.
func (g *Graph) Renumber() {
	for i, v := range g.Values {
		v.ID = ID(i)
	}
}

// Uses counts, for each value ID, the args and outputs that refer to it.
func (g *Graph) Uses() []int {
	uses := make([]int, len(g.Values))
	for _, v := range g.Values {
		for _, a := range v.Args {
			uses[a.ID]++
		}
	}
	for _, o := range g.Outputs {
		uses[o.Value.ID]++
	}
	return uses
}

// Users lists, for each value ID, the values that take it as an argument.
func (g *Graph) Users() [][]*Value {
	users := make([][]*Value, len(g.Values))
	for _, v := range g.Values {
		for _, a := range v.Args {
			users[a.ID] = append(users[a.ID], v)
		}
	}
	return users
}

// Clone returns a deep copy whose values are new objects with the same IDs. Passes that
// must leave their input intact (tests comparing before and after) clone first.
func (g *Graph) Clone() *Graph {
	out := &Graph{Name: g.Name, Values: make([]*Value, len(g.Values))}
	idx := make(map[*Value]*Value, len(g.Values))
	for i, v := range g.Values {
		nv := &Value{ID: v.ID, Op: v.Op, Type: v.Type, Attrs: v.Attrs.Clone(), Name: v.Name}
		nv.Args = make([]*Value, len(v.Args))
		for j, a := range v.Args {
			nv.Args[j] = idx[a]
		}
		idx[v] = nv
		out.Values[i] = nv
	}
	for _, o := range g.Outputs {
		out.Outputs = append(out.Outputs, Output{o.Name, idx[o.Value]})
	}
	return out
}

// Attrs are an op's static parameters. Values are int64, float64, string, bool or
// []int64; the text format prints them sorted by key.
type Attrs map[string]any

// Clone copies the map (slices are copied too).
func (a Attrs) Clone() Attrs {
	if a == nil {
		return nil
	}
	out := make(Attrs, len(a))
	for k, v := range a {
		if s, ok := v.([]int64); ok {
			v = append([]int64(nil), s...)
		}
		out[k] = v
	}
	return out
}

// Keys returns the attribute names in sorted order.
func (a Attrs) Keys() []string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Int returns an integer attribute (0 if absent).
func (a Attrs) Int(k string) int {
	switch x := a[k].(type) {
	case int64:
		return int(x)
	case int:
		return x
	}
	return 0
}

// Float returns a float attribute (0 if absent).
func (a Attrs) Float(k string) float64 {
	switch x := a[k].(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	return 0
}

// String returns a string attribute ("" if absent).
func (a Attrs) String(k string) string { s, _ := a[k].(string); return s }

// Bool returns a boolean attribute (false if absent).
func (a Attrs) Bool(k string) bool { b, _ := a[k].(bool); return b }

// Ints returns an integer-list attribute.
func (a Attrs) Ints(k string) []int64 { s, _ := a[k].([]int64); return s }
