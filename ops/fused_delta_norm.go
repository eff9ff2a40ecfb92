package ops

import (
	"pistil/graph"
)

// gated_delta_norm is the gated delta rule with the Gated DeltaNet's gated RMSNorm on its
// output: (gated_rms_norm(o, z, w), S') for (o, S') = gated_delta(q, k, v, g, beta, S).
// The raw output o is not a result: the fuse-delta-norm pass makes it only where the
// norm is o's one reader, so a GPU kernel that holds a value head's whole output in one
// group keeps o in registers. The updated state is the tuple's last element, as every
// state update's is.
func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "gated_delta_norm",
			Doc:   "(gated_rms_norm(o, z, w), S') for (o, S') = gated_delta(q, k, v, g, beta, S) {form, chunk, eps}: the delta rule and the per-head gated norm of its output",
			Args:  8,
			Flags: graph.StateUpdate,
			Attrs: []string{"form", "chunk", "eps"}},
		Ref: refGatedDeltaNorm,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			rule := graph.Attrs{"form": v.Attrs["form"], "chunk": v.Attrs["chunk"]}
			d := selectAll(b, b.Named("gated_delta", v.Name, rule, v.Args[:deltaNormZ]...), 2)
			y := b.Named("gated_rms_norm", v.Name, graph.Attrs{"eps": v.Attrs["eps"]}, d[0], v.Args[deltaNormZ], v.Args[deltaNormW])
			return []*graph.Value{y, d[1]}
		},
	})
}

// Argument positions of gated_delta_norm past gated_delta's six (q, k, v, g, beta, S).
const (
	deltaNormZ = 6 + iota // the gate, f32 like o
	deltaNormW            // the norm weight [Dv]
)

// refGatedDeltaNorm runs gated_delta's reference into scratch, then gated_rms_norm's on
// it: the unfused float32 arithmetic in the same order, so the same bits.
func refGatedDeltaNorm(env *Env, v *graph.Value, in, out []*Tensor) error {
	o, done := scratchF32(in[2].Shape...)
	defer done()
	if err := refGatedDelta(env, v, in[:deltaNormZ], []*Tensor{o, out[1]}); err != nil {
		return err
	}
	return refGatedRMSNorm(env, v, []*Tensor{o, in[deltaNormZ], in[deltaNormW]}, out[:1])
}
