package passes

import "pistil/graph"

// alapLevels gives every dispatching value its as-late-as-possible level: 0 for the
// first stage, up to longest-1, where longest is the number of dispatches on the longest
// dependency path. Values on one level never depend on each other; along every
// dependency the level strictly grows. Dependencies are the data edges plus, for session
// state, reader-before-update: every other reader of a state version must run before the
// op that updates it in place. isWork marks the dispatching values (not sources, not
// views); the levels of the others are not meaningful.
//
// One exception to as late as possible: a state update nothing in the step reads (the
// conv state's shift after a fused GDN step) goes one level after its last predecessor.
// Every step leaves its final state to the next, so at the last level it would only keep
// its inputs alive in the arena through the whole step.
func alapLevels(u *Unit) (level []int, isWork []bool, err error) {
	g := u.Graph
	n := len(g.Values)
	_, stateArg, err := graph.StateVersions(g, u.Ops)
	if err != nil {
		return nil, nil, err
	}
	isWork = make([]bool, n)
	for i, v := range g.Values {
		def, _ := u.Ops.Lookup(v.Op)
		isWork[i] = !def.Has(graph.Source) && !def.Has(graph.View)
	}
	succ := make([][]int, n)
	users := g.Users()
	for i, v := range g.Values {
		for _, a := range v.Args {
			succ[a.ID] = append(succ[a.ID], i)
		}
		if k := stateArg[i]; k >= 0 {
			for _, r := range readersThroughViews(u, v.Args[k], users) {
				if r != i {
					succ[r] = append(succ[r], i)
				}
			}
		}
	}
	// height: dispatches on the longest path from a value to a sink, itself included.
	// Successors come later in list order (topological order, and graph.Check puts state
	// readers before the update), so one backward sweep suffices.
	height := make([]int, n)
	longest := 0
	for i := n - 1; i >= 0; i-- {
		h := 0
		for _, s := range succ[i] {
			h = max(h, height[s])
		}
		if isWork[i] {
			h++
		}
		height[i] = h
		longest = max(longest, h)
	}
	level = make([]int, n)
	for i := range level {
		level[i] = longest - height[i]
	}
	// A view's or source's level is that of its first user, never before what it aliases.
	sink := func(i int) bool { return isWork[i] && stateArg[i] >= 0 && len(succ[i]) == 0 }
	early := map[int]int{}
	for p, ss := range succ {
		for _, i := range ss {
			if sink(i) {
				step := 0
				if isWork[p] {
					step = 1
				}
				early[i] = max(early[i], level[p]+step)
			}
		}
	}
	for i, l := range early {
		level[i] = l
	}
	return level, isWork, nil
}

// readersThroughViews lists the values that read v directly or through views of it.
func readersThroughViews(u *Unit, v *graph.Value, users [][]*graph.Value) []int {
	var out []int
	for _, r := range users[v.ID] {
		if def, _ := u.Ops.Lookup(r.Op); def.Has(graph.View) && r.Op != graph.OpSelect {
			out = append(out, readersThroughViews(u, r, users)...)
			continue
		}
		out = append(out, int(r.ID))
	}
	return out
}
