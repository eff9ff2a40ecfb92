package ops

import (
	"fmt"
	"sync"

	"pistil/graph"
)

// Fused ops do the work of several table ops in one dispatch. Each one's Expand (or
// ExpandTuple, for a tuple result) writes the same computation in the ops it fuses, and
// that expansion is the single source of its shape rule and its cost: the fused type is
// the type of what it expands to, and the fused cost is the expansion's work with its
// intermediates kept out of memory. The fusion passes (package passes) produce them; the
// references here are the CPU kernels, built from the unfused kernels' helpers.

// fusedOps are the ops registerFused added.
var fusedOps = map[string]bool{}

// IsFused says whether op is a fused op, whose cost is its expansion's.
func IsFused(op string) bool { return fusedOps[op] }

// registerFused adds a fused op whose Infer and Cost come from its expansion.
// check, when not nil, runs before the expansion: for rules the parts cannot see (how
// many args a variadic op takes, shapes a part would broadcast).
func registerFused(info *Info, check ...func(v *graph.Value) error) {
	fusedOps[info.Name] = true
	info.Infer = func(v *graph.Value) (graph.Type, error) {
		for _, c := range check {
			if err := c(v); err != nil {
				return graph.Type{}, err
			}
		}
		return inferFused(info, v)
	}
	info.Cost = func(v *graph.Value, b graph.Bindings) Cost { return fusedCost(info, v, b) }
	Default.Register(info)
}

// ExpandElems rewrites a fused value into the ops it fuses, appended through b, and
// returns one value per result element (one for a non-tuple result).
func ExpandElems(b *graph.Builder, v *graph.Value) ([]*graph.Value, error) {
	info, ok := Default.Info(v.Op)
	if !ok {
		return nil, fmt.Errorf("expand %s: unknown op %q", v.Ref(), v.Op)
	}
	return expandWith(info, b, v)
}

func expandWith(info *Info, b *graph.Builder, v *graph.Value) ([]*graph.Value, error) {
	var elems []*graph.Value
	switch {
	case info.ExpandTuple != nil:
		elems = info.ExpandTuple(b, v)
	case info.Expand != nil:
		elems = []*graph.Value{info.Expand(b, v)}
	default:
		return nil, fmt.Errorf("expand: %s is not a fused op", v.Op)
	}
	if err := b.Err(); err != nil {
		return nil, err
	}
	return elems, nil
}

// inferFused checks the args by expanding v into a scratch graph: every part checks its
// own args (shapes, dtypes, attrs), and the result is the parts' result types.
func inferFused(info *Info, v *graph.Value) (graph.Type, error) {
	if info.Args > 0 {
		if err := wantArgs(v, info.Args); err != nil {
			return graph.Type{}, err
		}
	}
	for i, a := range v.Args {
		if a == nil || a.Type.IsTuple() {
			return graph.Type{}, fmt.Errorf("%s is a tuple or missing; select an element", argName(i, "arg"))
		}
	}
	if err := requireAttrs(v, info.Attrs...); err != nil {
		return graph.Type{}, err
	}
	elems, err := expandWith(info, graph.NewBuilder(graph.New("infer"), Default), v)
	if err != nil {
		return graph.Type{}, fmt.Errorf("%s as the ops it fuses: %w", v.Op, err)
	}
	if len(elems) == 1 && info.ExpandTuple == nil {
		return elems[0].Type, nil
	}
	types := make([]graph.Type, len(elems))
	for i, e := range elems {
		types[i] = e.Type
	}
	return graph.Tuple(types...), nil
}

// fusedCost is what the fused kernel moves and computes: the flops of the parts; bytes
// read are the parts' reads of the fused op's own args (each activation once, however
// many parts read it; weights as each part touches them, so routed experts still count
// min(T·k, E) experts), and bytes written are the fused results only. The intermediates
// between the parts stay in registers or threadgroup memory and are not counted.
func fusedCost(info *Info, v *graph.Value, b graph.Bindings) Cost {
	g := graph.New("cost")
	elems, err := expandWith(info, graph.NewBuilder(g, Default), v)
	if err != nil {
		// lower turns a panicking cost into an error naming the value.
		panic(fmt.Sprintf("%s: %v", v.Op, err))
	}
	internal := make(map[*graph.Value]bool, len(g.Values))
	for _, p := range g.Values {
		internal[p] = true
	}
	// root follows views inside the expansion back to what they alias.
	root := func(a *graph.Value) *graph.Value {
		for internal[a] && len(a.Args) == 1 {
			def, _ := Default.Info(a.Op)
			if !def.Has(graph.View) {
				break
			}
			a = a.Args[0]
		}
		return a
	}
	read := map[*graph.Value]bool{}
	var c Cost
	for _, p := range g.Values {
		part, _ := Default.Info(p.Op)
		if part.Has(graph.View) || part.Cost == nil {
			continue
		}
		pc := part.Cost(p, b)
		c.Flops += pc.Flops
		c.BytesRead += pc.BytesRead
		for _, a := range p.Args {
			r := root(a)
			switch {
			case internal[r]:
				c.BytesRead -= a.Type.Bytes(b) // an intermediate: never in memory
			case r.Op != graph.OpWeight && read[r]:
				c.BytesRead -= a.Type.Bytes(b) // already read by an earlier part
			}
			read[r] = true
		}
	}
	// What the fused op writes is what its results' parts write: their whole types, but
	// for a part that writes only some of its result (kv_append's new cache rows).
	for _, e := range elems {
		part, _ := Default.Info(e.Op)
		if internal[e] && part.Cost != nil && !part.Has(graph.View) {
			c.BytesWritten += part.Cost(e, b).BytesWritten
		} else {
			c.BytesWritten += e.Type.Bytes(b)
		}
	}
	return c
}

// matmulOpFor is the unfused matmul op for a weight type: qmatmul for q4/q8, else matmul.
func matmulOpFor(w graph.Type) string {
	if w.DType.Quantized() {
		return "qmatmul"
	}
	return "matmul"
}

// expertMatmulOpFor is the same choice for stacked expert weights.
func expertMatmulOpFor(w graph.Type) string {
	if w.DType.Quantized() {
		return "expert_qmatmul"
	}
	return "expert_matmul"
}

// selectAll returns the elements of a tuple value.
func selectAll(b *graph.Builder, t *graph.Value, n int) []*graph.Value {
	out := make([]*graph.Value, n)
	for i := range out {
		out[i] = b.Op("select", graph.Attrs{"index": int64(i)}, t)
	}
	return out
}

// scratchPool recycles the intermediates of fused references. The unfused ops keep
// theirs in the plan's arena and a GPU kernel in registers; the CPU reference reuses
// buffers so that a fused step allocates nothing in the steady state.
var scratchPool sync.Pool

// scratchF32 returns an f32 tensor of the shape for an intermediate the caller overwrites
// in full (its contents are arbitrary), and the function that hands it back.
func scratchF32(shape ...int) (*Tensor, func()) {
	n := 4
	for _, d := range shape {
		n *= d
	}
	sc, _ := scratchPool.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
		sc.release = func() { scratchPool.Put(sc) }
	}
	if cap(sc.buf) < n {
		sc.buf = make([]byte, n)
	}
	sc.t = Tensor{DType: graph.F32, Shape: append(sc.t.Shape[:0], shape...), Data: sc.buf[:n]}
	return &sc.t, sc.release
}

// scratch is one of scratchPool's intermediates: its bytes, the tensor over them and the
// function that hands it back, all kept with it, so that taking one allocates nothing
// once the pool holds it (a decode step of the full model takes hundreds).
type scratch struct {
	buf     []byte
	t       Tensor
	release func()
}
