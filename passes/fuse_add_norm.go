package passes

import (
	"pistil/graph"
)

// fuseAddNorm folds a residual add into the RMSNorm that reads its sum: add_rms_norm
// writes the sum (the residual stream goes on from it) and the normed row in one
// dispatch, so the norm no longer waits a stage for the add. Every layer has two such
// pairs (the mixer's residual into post_attention_layernorm, the MoE's residual into the
// next layer's input_layernorm or the final norm).
func fuseAddNorm(u *Unit) error {
	r := newRewriter(u, "fuse-add-norm")
	for _, v := range u.Graph.Values {
		if !is(v, "rms_norm") || !r.free(v) {
			continue
		}
		sum := v.Args[0]
		if !is(sum, "add") || !r.free(sum) || !sum.Args[0].Type.Equal(sum.Args[1].Type) || sum.Args[0].Type.DType != graph.F32 {
			continue
		}
		fused, err := r.fuse("add→rms_norm", "add_rms_norm", v.Name, graph.Attrs{"eps": v.Attrs["eps"]},
			[]*graph.Value{sum.Args[0], sum.Args[1], v.Args[1]})
		if err != nil {
			return err
		}
		if err := r.replace(sum, r.elem(fused, 0, sum.Name)); err != nil {
			return err
		}
		if err := r.replace(v, r.elem(fused, 1, v.Name)); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}
