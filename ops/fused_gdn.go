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

// gated_delta_step is a whole Gated DeltaNet decode step after the input projections:
// the short conv with its SiLU over the in_proj_qkv output x (the conv state read, not
// written), the q and k heads cut from it and L2-normed, the v heads, the gates from a
// and b, and the gated delta rule over the recurrent state S. The conv state's update is
// conv_state_shift, a separate op: on a GPU every group of the step reads the old conv
// state of its head's q and k, so no group may overwrite it in the same dispatch.
//
// It has no expansion (the unfused conv1d would update the conv state the shift also
// updates); its meaning is this reference, built from the unfused ops' references, and
// the fuse-gdn-prologue pass only makes it for decode, where the GPU has its kernel.
func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "gated_delta_step",
			Doc: "gated_delta(l2(q), l2(k), v, gdn_gates(a, b, A_log, dt_bias), S) over the heads of silu(conv1d(x, conv_state, conv_w)) " +
				"{key_heads, q_start, k_start, v_start, q_eps, q_scale, k_eps, k_scale, form, chunk}; the conv state is only read",
			Args: 8, Flags: graph.StateUpdate, Attrs: gatedDeltaStepAttrs, Infer: inferGatedDeltaStep},
		Cost: costGatedDeltaStep,
		Ref:  refGatedDeltaStep,
	})
}

var gatedDeltaStepAttrs = []string{"key_heads", "q_start", "k_start", "v_start", "q_eps", "q_scale", "k_eps", "k_scale", "form", "chunk"}

// Argument positions of gated_delta_step.
const (
	stepX = iota
	stepA
	stepB
	stepConvState
	stepConvW
	stepALog
	stepDtBias
	stepS
)

func inferGatedDeltaStep(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 8); err != nil {
		return graph.Type{}, err
	}
	if err := requireAttrs(v, gatedDeltaStepAttrs...); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, stepX, "x", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	a, err := wantRank(v, stepA, "a", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	b, err := wantRank(v, stepB, "b", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	state, err := wantRank(v, stepConvState, "conv_state", 2, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := wantRank(v, stepConvW, "conv_w", 2, floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	aLog, err := wantRank(v, stepALog, "A_log", 1, floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	dtBias, err := wantRank(v, stepDtBias, "dt_bias", 1, floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	S, err := wantRank(v, stepS, "S", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	T, Hv, Dv := x.Shape[0], S.Shape[0], S.Shape[2]
	checks := []struct {
		what string
		a, b graph.Dim
	}{
		{"channels (x vs conv_w)", x.Shape[1], w.Shape[0]},
		{"channels (x vs conv_state)", x.Shape[1], state.Shape[1]},
		{"tokens (a vs x)", a.Shape[0], T},
		{"tokens (b vs x)", b.Shape[0], T},
		{"value heads (a vs S)", a.Shape[1], Hv},
		{"value heads (b vs S)", b.Shape[1], Hv},
		{"value heads (A_log vs S)", aLog.Shape[0], Hv},
		{"value heads (dt_bias vs S)", dtBias.Shape[0], Hv},
	}
	for _, c := range checks {
		if err := sameDim(c.what, c.a, c.b); err != nil {
			return graph.Type{}, err
		}
	}
	K, err := constDim("conv kernel", w.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	if K < 1 || state.Shape[0] != graph.D(K-1) {
		return graph.Type{}, fmt.Errorf("conv_state has %s rows, want kernel-1 = %d", state.Shape[0], K-1)
	}
	CD, err := constDim("conv channels", x.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	hv, err := constDim("value heads", Hv)
	if err != nil {
		return graph.Type{}, err
	}
	dk, err := constDim("key dim", S.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	dv, err := constDim("value dim", Dv)
	if err != nil {
		return graph.Type{}, err
	}
	hk := v.Attrs.Int("key_heads")
	if hk < 1 || hv%hk != 0 {
		return graph.Type{}, fmt.Errorf("value heads %d are not a multiple of key_heads %d", hv, hk)
	}
	for _, part := range []struct {
		name  string
		start int
		width int
	}{{"q", v.Attrs.Int("q_start"), hk * dk}, {"k", v.Attrs.Int("k_start"), hk * dk}, {"v", v.Attrs.Int("v_start"), hv * dv}} {
		if part.start < 0 || part.start+part.width > CD {
			return graph.Type{}, fmt.Errorf("%s channels [%d, %d) outside the conv's %d", part.name, part.start, part.start+part.width, CD)
		}
	}
	switch f := v.Attrs.String("form"); f {
	case "recurrent", "chunked":
	default:
		return graph.Type{}, fmt.Errorf("gated_delta_step form %q: want recurrent or chunked", f)
	}
	if c := v.Attrs.Int("chunk"); c < 1 {
		return graph.Type{}, fmt.Errorf("gated_delta_step chunk %d must be positive", c)
	}
	return graph.Tuple(f32(T, Hv, Dv), S), nil
}

// costGatedDeltaStep: every arg read once and the results written once (the conv output,
// q, k, v and the gates stay in registers); the conv's and the rule's flops.
func costGatedDeltaStep(v *graph.Value, b graph.Bindings) Cost {
	c := plainCost(v, b, 0)
	x, w, S := arg(v, stepX), arg(v, stepConvW), arg(v, stepS)
	T := int64(x.Shape[0].Eval(b))
	c.Flops = 2*elemsOf(x, b)*int64(w.Shape[1].Eval(b)) + T*elemsOf(S, b)*7
	return c
}

// refGatedDeltaStep runs the unfused references in order on scratch: the conv (without
// its state update), SiLU, the q and k heads with their L2 norms, the v heads, the gates
// and the delta rule.
func refGatedDeltaStep(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, state, S := in[stepX], in[stepConvState], in[stepS]
	T, CD := x.Shape[0], x.Shape[1]
	Hv, Dk, Dv := S.Shape[0], S.Shape[1], S.Shape[2]
	Hk := v.Attrs.Int("key_heads")

	y, done := scratchF32(T, CD)
	defer done()
	_, release, err := convolve(env, x, state, in[stepConvW], y)
	if err != nil {
		return err
	}
	release()
	ys := y.F32()
	siluGate(env, ys, ys, nil)

	heads := func(start, H, D int) (*Tensor, func()) {
		t, done := scratchF32(T, H, D)
		for tk := 0; tk < T; tk++ {
			copy(t.F32()[tk*H*D:(tk+1)*H*D], ys[tk*CD+start:tk*CD+start+H*D])
		}
		return t, done
	}
	normed := func(start int, eps, scale float32) (*Tensor, func()) {
		t, done := heads(start, Hk, Dk)
		h := t.F32()
		for r := 0; r+Dk <= len(h); r += Dk {
			hr := h[r : r+Dk]
			inv := float32(1 / math.Sqrt(float64(dot(hr, hr)+eps)))
			for i, e := range hr {
				hr[i] = e * inv * scale
			}
		}
		return t, done
	}
	q, doneQ := normed(v.Attrs.Int("q_start"), float32(v.Attrs.Float("q_eps")), float32(v.Attrs.Float("q_scale")))
	defer doneQ()
	k, doneK := normed(v.Attrs.Int("k_start"), float32(v.Attrs.Float("k_eps")), float32(v.Attrs.Float("k_scale")))
	defer doneK()
	val, doneV := heads(v.Attrs.Int("v_start"), Hv, Dv)
	defer doneV()

	g, doneG := scratchF32(T, Hv)
	defer doneG()
	beta, doneB := scratchF32(T, Hv)
	defer doneB()
	if err := refGDNGates(env, v, []*Tensor{in[stepA], in[stepB], in[stepALog], in[stepDtBias]}, []*Tensor{g, beta}); err != nil {
		return err
	}
	return refGatedDelta(env, v, []*Tensor{q, k, val, g, beta, S}, out)
}
