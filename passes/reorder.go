package passes

import (
	"sort"

	"pistil/graph"
)

// reorderByDepth sorts the computing values by their as-late-as-possible level in the
// dependency graph, keeping list order within a level. Values of one level never depend
// on each other, so in list order each level becomes one concurrent group and the plan
// needs exactly as many groups as the longest dependency chain. As late as possible
// (rather than as soon as possible) keeps values that depend only on weights (exp(A_log),
// dequantized copies) next to their consumer instead of alive from the first group on.
//
// Every op may move, not only those flagged ReorderSafe: the graph carries every effect
// as an edge (state versions included), so any topological order computes the same thing
// (TestReorderKeepsTheAnswer).
//
// Session state adds ordering the data flow does not show: every other reader of a state
// version must run before the op that updates it in place, so such a reader is treated as
// a predecessor of the update. Sources and views carry no work: each is placed just before
// its first user (sources first, then views), which keeps the text dump readable.
func reorderByDepth(u *Unit) error {
	g := u.Graph
	n := len(g.Values)
	level, isWork, err := alapLevels(u)
	if err != nil {
		return err
	}
	work := make([]int, 0, n)
	for i := range g.Values {
		if isWork[i] {
			work = append(work, i)
		}
	}
	sort.SliceStable(work, func(a, b int) bool { return level[work[a]] < level[work[b]] })
	// Emit each work value after its not-yet-emitted non-work args (recursively), so
	// sources and views sit right before their first user.
	emitted := make([]bool, n)
	order := make([]*graph.Value, 0, n)
	var emit func(i int)
	emit = func(i int) {
		if emitted[i] {
			return
		}
		emitted[i] = true
		for _, a := range g.Values[i].Args {
			if !isWork[a.ID] {
				emit(int(a.ID))
			}
		}
		order = append(order, g.Values[i])
	}
	for _, i := range work {
		emit(i)
	}
	for i := range g.Values { // values no work uses: sources and views that only feed outputs
		emit(i)
	}
	moved := 0
	for i, v := range order {
		if v != g.Values[i] {
			moved++
		}
	}
	g.Values = order
	g.Renumber()
	u.count("reorder: values moved", moved)
	return nil
}
