package passes

import (
	"fmt"
	"strings"

	"pistil/graph"
)

// specialisePhase binds T to the phase's token count everywhere: value types and shape
// attributes (reshape's "[T,16,512]"). C and N stay symbolic: C is a per-step scalar the
// kernels read at run time, N the session's capacity. For a prefill phase that needs only
// the last token's logits while the graph computes every row, it inserts last_row in
// front of the lm_head matmul, so that the head (the largest single matmul) runs on one
// row instead of T.
func specialisePhase(u *Unit) error {
	if u.Phase.Tokens <= 0 {
		return fmt.Errorf("phase %s: token count %d must be positive", u.Phase.Name, u.Phase.Tokens)
	}
	n := u.Phase.Tokens
	for _, v := range u.Graph.Values {
		v.Type = v.Type.Substitute(graph.SymT, n)
		for _, k := range v.Attrs.Keys() {
			s, ok := v.Attrs[k].(string)
			if !ok || !strings.HasPrefix(s, "[") || !strings.Contains(s, "T") {
				continue
			}
			shape, err := graph.ParseShape(s)
			if err != nil {
				continue // a string attr that merely starts with '[' is not a shape
			}
			v.Attrs[k] = shape.Substitute(graph.SymT, n).String()
		}
	}
	if u.Phase.LastLogitsOnly && n > 1 {
		if err := lastRowLogits(u); err != nil {
			return err
		}
	}
	return reinfer(u)
}

// lastRowLogits rewrites logits = matmul(x[T,H], w) into matmul(last_row(x), w).
func lastRowLogits(u *Unit) error {
	g := u.Graph
	logits := g.Output("logits")
	if logits == nil {
		return fmt.Errorf("graph has no logits output")
	}
	if len(logits.Type.Shape) != 2 || logits.Type.Shape[0] == graph.D(1) {
		return nil // already one row
	}
	if (logits.Op != "matmul" && logits.Op != "qmatmul") || len(logits.Args) != 2 {
		return fmt.Errorf("last-row logits: logits come from %s, not from a matmul the pass can narrow", logits.Op)
	}
	x := logits.Args[0]
	if len(x.Type.Shape) != 2 {
		return fmt.Errorf("last-row logits: lm_head input %s is not [T,H]", x.Type)
	}
	last := &graph.Value{Op: "last_row", Args: []*graph.Value{x}, Name: "last_token"}
	vals := make([]*graph.Value, 0, len(g.Values)+1)
	for _, v := range g.Values {
		if v == logits {
			vals = append(vals, last)
		}
		vals = append(vals, v)
	}
	logits.Args[0] = last
	g.Values = vals
	g.Renumber()
	u.count("specialise-phase: last-row logits", 1)
	return nil
}

// reinfer recomputes every derived type from the op table in list order, so a rewrite
// that changes one type (the logits' row count) propagates to its users.
func reinfer(u *Unit) error {
	for _, v := range u.Graph.Values {
		def, ok := u.Ops.Lookup(v.Op)
		if !ok {
			return fmt.Errorf("%s: unknown op %q", v.Ref(), v.Op)
		}
		if def.Has(graph.Source) || def.Infer == nil {
			continue
		}
		t, err := def.Infer(v)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", v.Ref(), v.Op, err)
		}
		v.Type = t
	}
	return nil
}
