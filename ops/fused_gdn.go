package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Fused Gated DeltaNet ops: the per-head decay and write strength from the a and b
// projections, the short causal conv with its SiLU, and the split of the conv output
// into q or k heads with their L2 norm.

func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "gdn_gates",
			Doc:  "(g, beta) = (-exp(A_log) * softplus(a + dt_bias), sigmoid(b)) for a, b f32[T,Hv], A_log and dt_bias [Hv]",
			Args: 4},
		Ref: refGDNGates,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			a, bp, aLog, dtBias := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
			decay := b.Op("neg", nil, b.Op("exp", nil, aLog))
			g := b.Named("mul", v.Name, nil, b.Op("softplus", nil, b.Op("add", nil, a, dtBias)), decay)
			return []*graph.Value{g, b.Named("sigmoid", v.Name, nil, bp)}
		},
	}, func(v *graph.Value) error {
		if len(v.Args) == 4 && !v.Args[0].Type.Equal(v.Args[1].Type) {
			return fmt.Errorf("gdn_gates: a %s and b %s differ", v.Args[0].Type, v.Args[1].Type)
		}
		if len(v.Args) == 4 && len(v.Args[2].Type.Shape) != 1 {
			return fmt.Errorf("gdn_gates: A_log %s is not a per-head vector", v.Args[2].Type)
		}
		return nil
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "conv1d_silu",
			Doc:   "(silu(y), state') for (y, state') = conv1d(x, state, w): the short conv and its activation",
			Args:  3,
			Flags: graph.StateUpdate},
		Ref: refConv1DSiLU,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			c := selectAll(b, b.Named("conv1d", v.Name, nil, v.Args...), 2)
			return []*graph.Value{b.Named("silu", v.Name, nil, c[0]), c[1]}
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "slice_l2_norm",
			Doc:   "l2_norm(reshape(slice(x))) {axis, start, end, shape, eps, scale}: one q or k split of the conv output, normed per head",
			Args:  1,
			Attrs: []string{"axis", "start", "end", "shape", "eps", "scale"}},
		Ref: refSliceL2Norm,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			a := v.Attrs
			s := b.Op("slice", graph.Attrs{"axis": a["axis"], "start": a["start"], "end": a["end"]}, v.Args[0])
			r := b.Op("reshape", graph.Attrs{"shape": a["shape"]}, s)
			return b.Named("l2_norm", v.Name, graph.Attrs{"eps": a["eps"], "scale": a["scale"]}, r)
		},
	})
}

func refGDNGates(env *Env, v *graph.Value, in, out []*Tensor) error {
	aLog, err := floats(in[2])
	if err != nil {
		return fmt.Errorf("gdn_gates A_log: %w", err)
	}
	dtBias, err := floats(in[3])
	if err != nil {
		return fmt.Errorf("gdn_gates dt_bias: %w", err)
	}
	a, bp, g, beta := in[0].F32(), in[1].F32(), out[0].F32(), out[1].F32()
	H := len(aLog)
	if H == 0 || len(dtBias) != H || len(a)%H != 0 || len(bp) != len(a) {
		return fmt.Errorf("gdn_gates: a %v, b %v, A_log %v, dt_bias %v do not share the head count", in[0].Shape, in[1].Shape, in[2].Shape, in[3].Shape)
	}
	// The weight-only decay -exp(A_log), once per head.
	decay := make([]float32, H)
	for h, x := range aLog {
		decay[h] = -float32(math.Exp(float64(x)))
	}
	for i, x := range a {
		h := i % H
		g[i] = softplus(x+dtBias[h]) * decay[h]
		beta[i] = sigmoid(bp[i])
	}
	return nil
}

func refConv1DSiLU(env *Env, v *graph.Value, in, out []*Tensor) error {
	if err := refConv1D(env, v, in, out); err != nil {
		return err
	}
	y := out[0].F32()
	siluGate(env, y, y, nil)
	return nil
}

func refSliceL2Norm(env *Env, v *graph.Value, in, out []*Tensor) error {
	// slice copies into out's storage (its bytes are the slice's, in order), then each
	// head of the reshaped result is normed in place.
	if err := refSlice(env, v, in, out); err != nil {
		return err
	}
	eps := float32(v.Attrs.Float("eps"))
	scale := float32(v.Attrs.Float("scale"))
	y := out[0].F32()
	D := out[0].Shape[len(out[0].Shape)-1]
	for r := 0; r+D <= len(y); r += D {
		yr := y[r : r+D]
		inv := float32(1 / math.Sqrt(float64(dot(yr, yr)+eps)))
		for i, x := range yr {
			yr[i] = x * inv * scale
		}
	}
	return nil
}
