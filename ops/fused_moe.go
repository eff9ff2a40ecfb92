package ops

import (
	"fmt"

	"pistil/graph"
)

// Fused mixture-of-experts ops: the router's projection with the routing itself, the
// routed experts' gate and up projections with the SwiGLU activation, and the experts'
// down projection with the weighted combine. Weight stacks may be float or q4/q8.

func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "matmul_router",
			Doc:  "router(x·Wᵀ) {k}: the router's logits and the softmax, top-k, renormalise -> (weights f32[T,k], ids i32[T,k])",
			Args: 2, Attrs: []string{"k"}},
		Ref: refMatmulRouter,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			x, w := v.Args[0], v.Args[1]
			r := b.Named("router", v.Name, graph.Attrs{"k": int64(v.Attrs.Int("k"))}, b.Op(matmulOpFor(w.Type), nil, x, w))
			return selectAll(b, r, 2)
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "expert_matmul_swiglu",
			Doc:  "silu(x·Wg[id]ᵀ) * (x·Wu[id]ᵀ) per routed (t, j): the experts' gate and up projections and activation -> f32[T,k,M]",
			Args: 4},
		Ref: refExpertMatmulSwiGLU,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, wg, wu, ids := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
			gate := b.Op(expertMatmulOpFor(wg.Type), nil, x, wg, ids)
			up := b.Op(expertMatmulOpFor(wu.Type), nil, x, wu, ids)
			return b.Named("swiglu", v.Name, nil, gate, up)
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "expert_matmul_combine",
			Doc:  "Σ_j weights[t,j] · x[t,j]·W[ids[t,j]]ᵀ: the experts' down projection and the weighted combine -> f32[T,M]",
			Args: 4},
		Ref: refExpertMatmulCombine,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, w, ids, weights := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
			return b.Named("moe_combine", v.Name, nil, b.Op(expertMatmulOpFor(w.Type), nil, x, w, ids), weights)
		},
	})
}

func refMatmulRouter(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, err := newWeightRows(in[1])
	if err != nil {
		return fmt.Errorf("matmul_router weight: %w", err)
	}
	x := in[0].F32()
	if len(x)%w.cols != 0 {
		return fmt.Errorf("matmul_router: x has %d elements, not a multiple of K = %d", len(x), w.cols)
	}
	T, E := len(x)/w.cols, w.rows()
	logits, release := scratchF32(T, E)
	defer release()
	mulRows(env, x, T, w, 0, E, logits.F32(), E)
	return refRouter(env, v, []*Tensor{logits}, out)
}

// The expert kernels are run as they are, over a scratch result: the fused reference
// costs what the unfused ones do (the CPU keeps its gather-by-expert loop), while the
// dispatch and the intermediate's round trip disappear from the plan.

func refExpertMatmulSwiGLU(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, wg, wu, ids := in[0], in[1], in[2], in[3]
	y := out[0]
	if done, err := expertSwiGLUInt8(env, v, x, wg, wu, ids, y); done {
		return err
	}
	up, release := scratchF32(y.Shape...)
	defer release()
	if err := refExpertMatmul(env, v, []*Tensor{x, wg, ids}, []*Tensor{y}); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := refExpertMatmul(env, v, []*Tensor{x, wu, ids}, []*Tensor{up}); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	ys := y.F32()
	siluGate(env, ys, ys, up.F32())
	return nil
}

func refExpertMatmulCombine(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, w, ids, weights := in[0], in[1], in[2], in[3]
	T, k := ids.Shape[0], ids.Shape[1]
	y, release := scratchF32(T, k, w.Shape[1])
	defer release()
	if err := refExpertMatmul(env, v, []*Tensor{x, w, ids}, []*Tensor{y}); err != nil {
		return err
	}
	return refMoECombine(env, v, []*Tensor{y, weights}, out)
}

// The shared expert as one more slot of the routed experts' fused ops (fuse-shared-expert):
// its gate and up projections ride in expert_matmul_swiglu_shared beside the routed ones
// (same input row), and its down projection, scaled by sigmoid(shared_expert_gate), in
// expert_matmul_combine_shared beside the routed down projections, so the MoE block's
// shared path adds no stage of its own. The shared expert keeps its own weights and
// width; only the input and the output are common.
func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "expert_matmul_swiglu_shared",
			Doc:  "expert_matmul_swiglu(x, Wg, Wu, ids) and matmul_swiglu(x, Sg, Su) in one dispatch: the routed experts' and the shared expert's gate/up projections and activation -> (routed f32[T,k,M], shared f32[T,SM])",
			Args: 6},
		Ref: refExpertMatmulSwiGLUShared,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			x, wg, wu, ids, sg, su := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4], v.Args[5]
			return []*graph.Value{
				b.Named("expert_matmul_swiglu", v.Name, nil, x, wg, wu, ids),
				b.Named("matmul_swiglu", v.Name+".shared", nil, x, sg, su),
			}
		},
	})
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "expert_matmul_combine_shared",
			Doc:  "expert_matmul_combine(x, W, ids, weights) + (xs·Sᵀ)·sigmoid(gate): the routed down projections, weighted and summed, and the shared expert's, scaled by its per-row gate f32[T,1] -> f32[T,M]",
			Args: 7},
		Ref: refExpertMatmulCombineShared,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			x, w, ids, weights, xs, ws, gate := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4], v.Args[5], v.Args[6]
			routed := b.Named("expert_matmul_combine", v.Name+".routed", nil, x, w, ids, weights)
			return b.Named("matmul_gated_add", v.Name, nil, xs, ws, gate, routed)
		},
	})
}

// The references run the unfused ones in turn, so the fusion changes no bit on the CPU.

func refExpertMatmulSwiGLUShared(env *Env, v *graph.Value, in, out []*Tensor) error {
	if err := refExpertMatmulSwiGLU(env, v, in[:4], out[:1]); err != nil {
		return fmt.Errorf("routed experts: %w", err)
	}
	if err := refMatmulSwiGLU(env, v, []*Tensor{in[0], in[4], in[5]}, out[1:]); err != nil {
		return fmt.Errorf("shared expert: %w", err)
	}
	return nil
}

func refExpertMatmulCombineShared(env *Env, v *graph.Value, in, out []*Tensor) error {
	routed, release := scratchF32(out[0].Shape...)
	defer release()
	if err := refExpertMatmulCombine(env, v, in[:4], []*Tensor{routed}); err != nil {
		return fmt.Errorf("routed experts: %w", err)
	}
	if err := refMatmulGatedAdd(env, v, []*Tensor{in[4], in[5], in[6], routed}, out); err != nil {
		return fmt.Errorf("shared expert: %w", err)
	}
	return nil
}

// The routing itself in the routed experts' gate/up dispatch (fuse-expert-routing): the
// router's softmax, top-k and renormalise, and the shared expert's gate projection, join
// expert_matmul_swiglu_shared, so the MoE block is the router's projection, this op and
// the combine.
func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "expert_route_swiglu_shared",
			Doc:  "router(logits) {k}, expert_matmul_swiglu_shared(x, Wg, Wu, ids, Sg, Su) and x·Wsgᵀ in one dispatch -> (weights f32[T,k], ids i32[T,k], routed f32[T,k,M], shared f32[T,SM], shared gate f32[T,1])",
			Args: 7, Attrs: []string{"k"}},
		Ref: refExpertRouteSwiGLUShared,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			x, logits, wg, wu, sg, su, wsg := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4], v.Args[5], v.Args[6]
			route := selectAll(b, b.Named("router", v.Name+".route", graph.Attrs{"k": int64(v.Attrs.Int("k"))}, logits), 2)
			acts := selectAll(b, b.Named("expert_matmul_swiglu_shared", v.Name, nil, x, wg, wu, route[1], sg, su), 2)
			gate := b.Named(matmulOpFor(wsg.Type), v.Name+".shared_gate", nil, x, wsg)
			return []*graph.Value{route[0], route[1], acts[0], acts[1], gate}
		},
	})
}

func refExpertRouteSwiGLUShared(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, logits, wg, wu, sg, su, wsg := in[0], in[1], in[2], in[3], in[4], in[5], in[6]
	weights, ids := out[0], out[1]
	if err := refRouter(env, v, []*Tensor{logits}, []*Tensor{weights, ids}); err != nil {
		return err
	}
	if err := refExpertMatmulSwiGLUShared(env, v, []*Tensor{x, wg, wu, ids, sg, su}, out[2:4]); err != nil {
		return err
	}
	if err := refMatmul(env, v, []*Tensor{x, wsg}, out[4:]); err != nil {
		return fmt.Errorf("shared expert gate: %w", err)
	}
	return nil
}
