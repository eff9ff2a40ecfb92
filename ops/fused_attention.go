package ops

import (
	"fmt"

	"pistil/graph"
)

// Fused ops of the attention mixer and of the mixers' output projections: the per-head
// q/k RMSNorm with the RoPE that follows it, and two projections that compute their
// input in the prologue: attention's sigmoid output gate, and the Gated DeltaNet's gated
// RMSNorm (per head of Dv values, recomputed by each threadgroup: the input row is read
// in full by a matmul anyway).

func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "rms_norm_rope",
			Doc:   "rope(rms_norm(x, w)) {eps, dims, theta}: the per-head q or k norm and its rotary embedding",
			Args:  2,
			Flags: graph.StepScalars,
			Attrs: []string{"eps", "dims", "theta"}},
		Ref: refRMSNormRoPE,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			n := b.Op("rms_norm", graph.Attrs{"eps": v.Attrs["eps"]}, v.Args...)
			return b.Named("rope", v.Name, graph.Attrs{"dims": v.Attrs["dims"], "theta": v.Attrs["theta"]}, n)
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "slice_rms_norm_rope",
			Doc:   "rms_norm_rope(slice(x), w) {axis, start, end, eps, dims, theta}: the query heads' norm and RoPE read from their slice of q_proj's output",
			Args:  2,
			Flags: graph.StepScalars,
			Attrs: []string{"axis", "start", "end", "eps", "dims", "theta"}},
		Ref: refSliceRMSNormRoPE,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			a := v.Attrs
			s := b.Op("slice", graph.Attrs{"axis": a["axis"], "start": a["start"], "end": a["end"]}, v.Args[0])
			return b.Named("rms_norm_rope", v.Name, graph.Attrs{"eps": a["eps"], "dims": a["dims"], "theta": a["theta"]}, s, v.Args[1])
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "rms_norm_rope_append",
			Doc:   "kv_append(cache, rms_norm_rope(x, w)) {eps, dims, theta}: the key heads' norm and RoPE written straight into the cache rows",
			Args:  3,
			Flags: graph.StateUpdate | graph.StepScalars,
			Attrs: []string{"eps", "dims", "theta"}},
		Ref: refRMSNormRoPEAppend,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			cache, x, w := v.Args[0], v.Args[1], v.Args[2]
			k := b.Op("rms_norm_rope", graph.Attrs{"eps": v.Attrs["eps"], "dims": v.Attrs["dims"], "theta": v.Attrs["theta"]}, x, w)
			return b.Named("kv_append", v.Name, nil, cache, k)
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "sigmoid_gate_matmul",
			Doc:  "(a * sigmoid(g)) · Wᵀ: a projection of a sigmoid-gated input (attention's output gate before o_proj)",
			Args: 3},
		Ref: refSigmoidGateMatmul,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			a, g, w := v.Args[0], v.Args[1], v.Args[2]
			return b.Named(matmulOpFor(w.Type), v.Name, nil, b.Op("mul", nil, a, b.Op("sigmoid", nil, g)), w)
		},
	}, func(v *graph.Value) error {
		if len(v.Args) == 3 && !v.Args[0].Type.Equal(v.Args[1].Type) {
			return fmt.Errorf("sigmoid_gate_matmul: a %s and gate %s differ", v.Args[0].Type, v.Args[1].Type)
		}
		return nil
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "gated_rms_norm_matmul",
			Doc:   "reshape(gated_rms_norm(x, z, wn), shape) · Wᵀ {eps, shape}: the gated norm per head, then the output projection",
			Args:  4,
			Attrs: []string{"eps", "shape"}},
		Ref: refGatedRMSNormMatmul,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, z, wn, w := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
			n := b.Op("gated_rms_norm", graph.Attrs{"eps": v.Attrs["eps"]}, x, z, wn)
			return b.Named(matmulOpFor(w.Type), v.Name, nil, b.Op("reshape", graph.Attrs{"shape": v.Attrs["shape"]}, n), w)
		},
	})
}

func refRMSNormRoPE(env *Env, v *graph.Value, in, out []*Tensor) error {
	if err := refRMSNorm(env, v, in, out); err != nil {
		return err
	}
	// RoPE rotates in place: it reads each pair before writing it.
	return refRoPE(env, v, out, out)
}

func refSliceRMSNormRoPE(env *Env, v *graph.Value, in, out []*Tensor) error {
	// slice copies into out's storage, then the heads are normed and rotated in place.
	if err := refSlice(env, v, in[:1], out); err != nil {
		return err
	}
	return refRMSNormRoPE(env, v, []*Tensor{out[0], in[1]}, out)
}

func refRMSNormRoPEAppend(env *Env, v *graph.Value, in, out []*Tensor) error {
	x := in[1]
	rotated, release := scratchF32(x.Shape...)
	defer release()
	if err := refRMSNormRoPE(env, v, in[1:], []*Tensor{rotated}); err != nil {
		return err
	}
	return refKVAppend(env, v, []*Tensor{in[0], rotated}, out)
}

func refSigmoidGateMatmul(env *Env, v *graph.Value, in, out []*Tensor) error {
	a, g := in[0].F32(), in[1].F32()
	if len(a) != len(g) {
		return fmt.Errorf("sigmoid_gate_matmul: a has %d elements, gate %d", len(a), len(g))
	}
	gated, release := scratchF32(len(a))
	defer release()
	x := gated.F32()
	fast := !env.referenceKernels()
	gate := func(lo, hi int) { sigmoidGate(fast, x[lo:hi], a[lo:hi], g[lo:hi]) }
	// Each sigmoid is a float64 exponential, some 10 ns: a 512-token chunk's 2M of them
	// took a third of the op, on one core; a decode step's 4,096 still repay a region.
	if len(a) < sigmoidGateParallel {
		gate(0, len(a))
	} else {
		parallelRange(env, len(a), gate)
	}
	return matmulInto(env, v, x, in[2], out[0])
}

// sigmoidGateParallel is the fewest gate elements refSigmoidGateMatmul splits over the workers.
const sigmoidGateParallel = 2048

func refGatedRMSNormMatmul(env *Env, v *graph.Value, in, out []*Tensor) error {
	normed, release := scratchF32(in[0].Shape...)
	defer release()
	if err := refGatedRMSNorm(env, v, in[:3], []*Tensor{normed}); err != nil {
		return err
	}
	return matmulInto(env, v, normed.F32(), in[3], out[0])
}

// matmulInto is the matmul kernel over x (rows of K = w's last dim) into y.
func matmulInto(env *Env, v *graph.Value, x []float32, wt, y *Tensor) error {
	w, err := newWeightRows(wt)
	if err != nil {
		return fmt.Errorf("%s weight: %w", v.Op, err)
	}
	if len(x)%w.cols != 0 {
		return fmt.Errorf("%s: input has %d elements, not a multiple of K = %d", v.Op, len(x), w.cols)
	}
	mulRows(env, x, len(x)/w.cols, w, 0, w.rows(), y.F32(), w.rows())
	return nil
}
