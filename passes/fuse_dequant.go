package passes

import (
	"fmt"

	"pistil/graph"
)

// fuseRule folds a dequant feeding argument Arg of op From into the fused op To, which
// reads the quantized weight directly (dequantizing on the fly).
type fuseRule struct {
	Name     string
	From, To string
	Arg      int
}

var dequantRules = []fuseRule{
	{Name: "dequant→matmul", From: "matmul", To: "qmatmul", Arg: 1},
	{Name: "dequant→expert_matmul", From: "expert_matmul", To: "expert_qmatmul", Arg: 1},
}

// fuseDequant applies dequantRules to every matching value, then deletes the dequant
// values nothing uses any more. The dequantized f32 copy of a weight is never
// materialised, so the step reads the packed 4- or 8-bit weight once instead of reading
// it, writing four bytes per element and reading those back; for routed experts the
// fused op also reads only the selected experts instead of the whole stack.
func fuseDequant(u *Unit) error {
	g := u.Graph
	for _, v := range g.Values {
		for _, r := range dequantRules {
			if v.Op != r.From || r.Arg >= len(v.Args) || v.Args[r.Arg].Op != "dequant" {
				continue
			}
			def, ok := u.Ops.Lookup(r.To)
			if !ok {
				return fmt.Errorf("rule %s: fused op %s is not in the op table", r.Name, r.To)
			}
			fused := &graph.Value{ID: v.ID, Op: r.To, Attrs: v.Attrs, Name: v.Name, Args: append([]*graph.Value(nil), v.Args...)}
			fused.Args[r.Arg] = v.Args[r.Arg].Args[0]
			t, err := def.Infer(fused)
			if err != nil {
				return fmt.Errorf("rule %s on %s: %w", r.Name, v.Ref(), err)
			}
			if !t.Equal(v.Type) {
				return fmt.Errorf("rule %s on %s changes the type from %s to %s", r.Name, v.Ref(), v.Type, t)
			}
			v.Op, v.Args = fused.Op, fused.Args
			u.count("fuse-dequant: "+r.Name, 1)
		}
	}
	removed := deleteDead(g, func(v *graph.Value) bool { return v.Op == "dequant" })
	u.count("fuse-dequant: dequant deleted", removed)
	return nil
}

// deleteDead removes values that match and have no use (no user, not an output),
// repeating until none is left, and renumbers. It returns how many it removed.
func deleteDead(g *graph.Graph, candidate func(v *graph.Value) bool) int {
	removed := 0
	for {
		uses := g.Uses()
		kept := g.Values[:0:0]
		n := 0
		for _, v := range g.Values {
			if uses[v.ID] == 0 && candidate(v) {
				n++
				continue
			}
			kept = append(kept, v)
		}
		if n == 0 {
			return removed
		}
		removed += n
		g.Values = kept
		g.Renumber()
	}
}
