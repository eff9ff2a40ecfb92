package passes

import (
	"fmt"

	"pistil/graph"
	"pistil/ops"
	"pistil/plan"
)

// lower emits the phase's plan: one dispatch per computing value (sources and views emit
// none) with its operands, byte ranges, group and cost, plus buffers, groups, the
// reduced DAG and the totals `pistil compile` prints.
func lower(u *Unit) error {
	if u.Memory == nil || u.Schedule == nil {
		return fmt.Errorf("lower needs plan-memory and schedule to have run")
	}
	m, s := u.Memory, u.Schedule
	bind := graph.Bindings{T: u.Phase.Tokens, C: u.Phase.Context, N: u.Phase.Context + u.Phase.Tokens}
	p := &plan.Plan{
		Model:   u.Graph.Name,
		Phase:   u.Phase.Name,
		Tokens:  u.Phase.Tokens,
		Context: u.Phase.Context,
		Buffers: append([]plan.Buffer(nil), m.Buffers...),
		Groups:  append([]plan.Group(nil), s.Groups...),
		Edges:   append([]plan.Edge(nil), s.Edges...),
		Passes:  append(append([]string(nil), u.Ran...), "lower"),
		Backend: u.Phase.Backend,
	}
	group := make([]int, len(s.Dispatches))
	for gi, g := range s.Groups {
		for d := g.First; d <= g.Last; d++ {
			group[d] = gi
		}
	}
	for i, a := range s.Dispatches {
		v := a.Value
		info, ok := u.Ops.Info(v.Op)
		if !ok || info.Cost == nil {
			return fmt.Errorf("%s: op %s has no cost in the table", v.Ref(), v.Op)
		}
		d := plan.Dispatch{
			Index:   i,
			Op:      v.Op,
			Value:   v.ID,
			Label:   dispatchLabel(v),
			Attrs:   v.Attrs.Clone(),
			Reads:   a.Reads,
			Writes:  a.Writes,
			Group:   group[i],
			Results: m.Place[v.ID],
		}
		for _, arg := range v.Args {
			d.Args = append(d.Args, m.Place[arg.ID][0])
		}
		d.Grid = grid(d.Results[0].Type, bind)
		c, err := costSafely(info, v, bind)
		if err != nil {
			return err
		}
		d.BytesRead, d.BytesWritten, d.Flops = c.BytesRead, c.BytesWritten, c.Flops
		d.WeightBytesRead = weightBytes(v, c, bind)
		p.Dispatches = append(p.Dispatches, d)
	}
	p.Totals = plan.ComputeTotals(p)
	p.Totals.LongestChain = s.LongestChain
	u.Plan = p
	return nil
}

// dispatchLabel names a dispatch by the weight it reads (what a profile wants to see),
// else by its value's label.
func dispatchLabel(v *graph.Value) string {
	for _, a := range v.Args {
		if a.Op == graph.OpWeight {
			return a.Name
		}
	}
	return v.Name
}

// grid is the dispatch's logical extent: the result's last dimension, then the product
// of the others. Backends choose their own threadgroup shapes from it.
func grid(t graph.Type, bind graph.Bindings) [3]int {
	dims := t.Shape.Eval(bind)
	if len(dims) == 0 {
		return [3]int{1, 1, 1}
	}
	rows := 1
	for _, d := range dims[:len(dims)-1] {
		rows *= d
	}
	return [3]int{dims[len(dims)-1], rows, 1}
}

// costSafely runs an op's cost function, turning a panic into an error naming the value.
func costSafely(info *ops.Info, v *graph.Value, bind graph.Bindings) (c ops.Cost, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s (%s): cost: %v", v.Ref(), v.Op, r)
		}
	}()
	return info.Cost(v, bind), nil
}

// weightBytes is the part of a dispatch's bytes read that comes from weights. The op
// table's cost knows how much of a weight an op touches (an embedding row, the top-k
// experts) and counts every other argument in full, so the weight part is what remains
// after the non-weight arguments, bounded by the weights' full size. A fused op need not
// read its arguments in full (a slice read in place, the cache an append only writes),
// so its weight part is the sum of its parts' (the ops its Expand makes, as fusedCost
// counts them: a qmatmul part stands as it is, not as a dequant of the whole weight).
func weightBytes(v *graph.Value, c ops.Cost, bind graph.Bindings) int64 {
	if !ops.IsFused(v.Op) {
		return argWeightBytes(v, c, bind)
	}
	g := graph.New("weights")
	if _, err := ops.ExpandElems(graph.NewBuilder(g, ops.Default), v); err != nil {
		return argWeightBytes(v, c, bind)
	}
	var n int64
	for _, p := range g.Values {
		if part, ok := ops.Default.Info(p.Op); ok && part.Cost != nil && !part.Has(graph.View) {
			n += weightBytes(p, part.Cost(p, bind), bind)
		}
	}
	return n
}

// argWeightBytes is weightBytes for one op whose non-weight arguments are read in full.
func argWeightBytes(v *graph.Value, c ops.Cost, bind graph.Bindings) int64 {
	var weights, others int64
	for _, a := range v.Args {
		if a.Op == graph.OpWeight {
			weights += a.Type.Bytes(bind)
		} else {
			others += a.Type.Bytes(bind)
		}
	}
	if weights == 0 {
		return 0
	}
	return min(max(c.BytesRead-others, 0), weights)
}
