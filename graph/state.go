package graph

import "fmt"

// Op names the graph itself must know: source kinds and tuple selection. Everything else
// about ops comes from the OpSet.
const (
	OpInput  = "input"
	OpWeight = "weight"
	OpState  = "state"
	OpSelect = "select"
)

// StateVersions follows session state through the graph. For each value ID it returns the
// "state" source value that the value is a version of, or nil. A version is the state
// source itself, the result of a StateUpdate op (its whole result when that is not a
// tuple, else the LAST element of its tuple, taken by select), by convention of the op
// table: kv_append returns cache', conv1d returns (y, state'), gated_delta (o, S').
//
// It also returns, for each value ID of a StateUpdate op, the index of its state argument
// (-1 for other values). A StateUpdate op may also read other states (a fused step that
// reads the conv state and updates the recurrent one): then its state argument is the one
// version of the updated result's type (in place needs equal types), and the others are
// plain reads. A StateUpdate op without a state-version argument, or with several of the
// updated result's type, is an error.
func StateVersions(g *Graph, ops OpSet) (stateOf []*Value, stateArg []int, err error) {
	stateOf = make([]*Value, len(g.Values))
	stateArg = make([]int, len(g.Values))
	for i, v := range g.Values {
		stateArg[i] = -1
		if int(v.ID) != i {
			return nil, nil, fmt.Errorf("v%d is at position %d: IDs must be dense (Renumber)", v.ID, i)
		}
		if v.Op == OpState {
			stateOf[i] = v
			continue
		}
		if v.Op == OpSelect && len(v.Args) == 1 {
			// Topological order means the tuple was visited first.
			t := v.Args[0]
			if inGraph(g, t) && t.ID < v.ID && stateArg[t.ID] >= 0 && t.Type.IsTuple() &&
				v.Attrs.Int("index") == len(t.Type.Elems)-1 {
				stateOf[i] = stateOf[t.Args[stateArg[t.ID]].ID]
			}
			continue
		}
		def, ok := ops.Lookup(v.Op)
		if !ok || !def.Has(StateUpdate) {
			continue
		}
		var versions []int
		for j, a := range v.Args {
			if inGraph(g, a) && a.ID < v.ID && stateOf[a.ID] != nil {
				versions = append(versions, j)
			}
		}
		if len(versions) == 0 {
			return nil, nil, fmt.Errorf("%s (%s) is a state update but none of its args is a version of a state value", v.Ref(), v.Op)
		}
		found := versions[0]
		if len(versions) > 1 {
			updated := v.Type
			if updated.IsTuple() && len(updated.Elems) > 0 {
				updated = updated.Elems[len(updated.Elems)-1]
			}
			found = -1
			for _, j := range versions {
				if !v.Args[j].Type.Equal(updated) {
					continue
				}
				if found >= 0 {
					return nil, nil, fmt.Errorf("%s (%s) takes two state versions of its updated state's type %s (args %d and %d): a state update updates one state", v.Ref(), v.Op, updated, found, j)
				}
				found = j
			}
			if found < 0 {
				return nil, nil, fmt.Errorf("%s (%s) reads state versions (args %v) but none has its updated state's type %s", v.Ref(), v.Op, versions, updated)
			}
		}
		stateArg[i] = found
		if !v.Type.IsTuple() {
			stateOf[i] = stateOf[v.Args[found].ID]
		}
	}
	return stateOf, stateArg, nil
}

func inGraph(g *Graph, v *Value) bool {
	return v != nil && v.ID >= 0 && int(v.ID) < len(g.Values) && g.Values[v.ID] == v
}
