package passes

import (
	"pistil/graph"
)

// fuseProjections is horizontal fusion: the projections that read the same activation
// (the Gated DeltaNet's in_proj_qkv, z, b and a; attention's q, k and v) become one
// matmuls dispatch with one result per weight. The activation is read once and the
// launches and their stage collapse into one.
//
// Only projections of weights (or of a dequantized weight) join: a matmul whose right
// operand is an activation could depend on a sibling, which one dispatch cannot honour.
func fuseProjections(u *Unit) error {
	r := newRewriter(u, "fuse-projections")
	byInput := map[*graph.Value][]*graph.Value{}
	var inputs []*graph.Value
	for _, v := range u.Graph.Values {
		if !is(v, plainMatmuls...) || !isWeightOperand(v.Args[1]) {
			continue
		}
		x := v.Args[0]
		if byInput[x] == nil {
			inputs = append(inputs, x)
		}
		byInput[x] = append(byInput[x], v)
	}
	for _, x := range inputs {
		projs := byInput[x]
		if len(projs) < 2 {
			continue
		}
		args := []*graph.Value{x}
		for _, p := range projs {
			args = append(args, p.Args[1])
		}
		fused, err := r.fuse("same-input projections", "matmuls", sibling(projs[0].Name, "projections"), nil, args)
		if err != nil {
			return err
		}
		u.count("fuse-projections: projections merged", len(projs))
		for i, p := range projs {
			if err := r.replace(p, r.elem(fused, i, p.Name)); err != nil {
				return err
			}
		}
	}
	r.finish()
	return nil
}

func isWeightOperand(w *graph.Value) bool {
	return w.Op == graph.OpWeight || (w.Op == "dequant" && w.Args[0].Op == graph.OpWeight)
}
