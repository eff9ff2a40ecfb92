// Package ops is the op table as data: for every op its meaning, flags, shape rule, cost
// and pure-Go reference. The reference is both the CPU backend's kernel and the oracle the
// GPU backends and every pass are tested against. One file per op family.
package ops

import (
	"context"
	"fmt"
	"sort"

	"pistil/graph"
)

// Info is one entry of the op table.
type Info struct {
	graph.OpDef
	// Cost returns bytes read, bytes written and flops of one execution with the symbols
	// bound. Weights count as read in full unless the op reads only part of them (an
	// embedding row, the routed experts): such ops say so in their cost.
	Cost func(v *graph.Value, b graph.Bindings) Cost
	// Ref is the pure-Go reference: it reads in (one tensor per arg) and writes out (one
	// tensor per result element; one for a non-tuple result). out tensors are allocated by
	// the caller with the inferred type; a StateUpdate op's state output may alias its
	// state input. Ref returns an error for data it cannot process (an out-of-range token
	// id), never panics on it. Source and View ops have no Ref.
	Ref func(env *Env, v *graph.Value, in, out []*Tensor) error
	// Expand, for a fused op, rewrites v in terms of the ops it fuses (appended through b)
	// and returns the value that replaces it. Tests check Ref(fused) == Ref(expanded).
	Expand func(b *graph.Builder, v *graph.Value) *graph.Value
	// ExpandTuple is Expand for a fused op whose result is a tuple: one value per
	// element, in order.
	ExpandTuple func(b *graph.Builder, v *graph.Value) []*graph.Value
}

// Cost is the traffic and work of one dispatch.
type Cost struct {
	BytesRead    int64
	BytesWritten int64
	Flops        int64
}

// Add sums two costs.
func (c Cost) Add(o Cost) Cost {
	return Cost{c.BytesRead + o.BytesRead, c.BytesWritten + o.BytesWritten, c.Flops + o.Flops}
}

// Env is what a reference needs beyond its tensors: the step's symbol bindings (T tokens
// at positions C..C+T-1), a worker count for splitting loops across cores, and which
// kernels the heavy loops use (KernelsFast, the default when empty, or KernelsReference).
type Env struct {
	Bind    graph.Bindings
	Workers int
	Kernels string
	// Activations is ActivationsF32, ActivationsInt16 (decode's one-row q4 matmuls),
	// ActivationsInt8 (those of more than one row) or ActivationsInt8All (both); empty
	// means float32.
	Activations string
	// Labels is the pprof labels of the dispatch being run (op=<op>), which the worker
	// pool's helpers take on for its parallel loops; nil, none.
	Labels context.Context
}

// Table is the registry of ops. It implements graph.OpSet.
type Table struct{ byName map[string]*Info }

// Default is the table every package uses; op family files register into it from init.
var Default = &Table{byName: map[string]*Info{}}

// Register adds an op; a duplicate name is a programming error.
func (t *Table) Register(info *Info) {
	if _, dup := t.byName[info.Name]; dup {
		panic(fmt.Sprintf("ops: %s registered twice", info.Name))
	}
	t.byName[info.Name] = info
}

// Lookup implements graph.OpSet.
func (t *Table) Lookup(name string) (*graph.OpDef, bool) {
	info, ok := t.byName[name]
	if !ok {
		return nil, false
	}
	return &info.OpDef, true
}

// Info returns the full entry of an op.
func (t *Table) Info(name string) (*Info, bool) {
	info, ok := t.byName[name]
	return info, ok
}

// Names lists every op in sorted order.
func (t *Table) Names() []string {
	names := make([]string, 0, len(t.byName))
	for n := range t.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
