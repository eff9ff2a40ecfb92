package graph

import "fmt"

// Builder appends values to a graph, inferring each result type from the op table. The
// first error (an unknown op, a shape mismatch) is kept and every later call becomes a
// no-op returning a poisoned value, so declaration code reads straight through and checks
// Err once at the end, as with bufio.Writer.
type Builder struct {
	G   *Graph
	ops OpSet
	err error
}

// NewBuilder returns a builder that appends to g.
func NewBuilder(g *Graph, ops OpSet) *Builder { return &Builder{G: g, ops: ops} }

// Err returns the first error met while building.
func (b *Builder) Err() error { return b.err }

// Op appends op(args...) with attrs and returns the new value.
func (b *Builder) Op(op string, attrs Attrs, args ...*Value) *Value {
	return b.Named(op, "", attrs, args...)
}

// Named appends op(args...) with a name (the binding of source values, a debug label
// otherwise).
func (b *Builder) Named(op, name string, attrs Attrs, args ...*Value) *Value {
	if b.err != nil {
		return &Value{ID: -1, Op: op}
	}
	def, ok := b.ops.Lookup(op)
	if !ok {
		b.err = fmt.Errorf("build %s: unknown op %q", name, op)
		return &Value{ID: -1, Op: op}
	}
	for _, a := range args {
		if a == nil || a.ID < 0 {
			b.err = fmt.Errorf("build %s %s: argument is not a value of this graph", op, name)
			return &Value{ID: -1, Op: op}
		}
	}
	v := &Value{ID: -1, Op: op, Args: args, Attrs: attrs, Name: name}
	t, err := def.Infer(v)
	if err != nil {
		b.err = fmt.Errorf("build %s %s: %w", op, name, err)
		return v
	}
	return b.G.NewValue(op, t, attrs, name, args...)
}

// Source appends an argument-less value of a given type: a weight, a state, an input.
// Source types cannot be inferred, so they are given.
func (b *Builder) Source(op, name string, t Type, attrs Attrs) *Value {
	if b.err != nil {
		return &Value{ID: -1, Op: op}
	}
	if def, ok := b.ops.Lookup(op); !ok || !def.Has(Source) {
		b.err = fmt.Errorf("build %s: %q is not a source op", name, op)
		return &Value{ID: -1, Op: op}
	}
	return b.G.NewValue(op, t, attrs, name)
}
