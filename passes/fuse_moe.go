package passes

import (
	"fmt"

	"pistil/gpu"
	"pistil/graph"
)

// Mixture-of-experts fusions. Each is its own pass with its own switch; with
// fuse-add-norm (which takes the norm and the residual add) the first four take the MoE
// block from 17 dispatches to 7: add_rms_norm, matmul_router, expert_matmul_swiglu,
// expert_matmul_combine, matmul_swiglu (shared), the shared_expert_gate projection, and
// matmul_gated_add (shared down, its sigmoid gate and the add of the routed output).
// fuse-shared-expert makes the shared expert a slot of the routed ops (5), and
// fuse-expert-routing moves the routing and the gate projection into the experts' gate/up
// op (4: add_rms_norm, the router's projection, expert_route_swiglu_shared,
// expert_matmul_combine_shared).

var plainMatmuls = []string{"matmul", "qmatmul"}
var expertMatmuls = []string{"expert_matmul", "expert_qmatmul"}

// fuseSwiGLU folds a gate and an up projection of the same input, read only by a swiglu,
// into one dispatch with the activation in its epilogue: matmul_swiglu for the shared
// expert, expert_matmul_swiglu for the routed experts (same input and same ids).
func fuseSwiGLU(u *Unit) error {
	r := newRewriter(u, "fuse-swiglu")
	for _, v := range u.Graph.Values {
		if !is(v, "swiglu") || !r.free(v) {
			continue
		}
		gate, up := v.Args[0], v.Args[1]
		if gate == up || !r.only(gate) || !r.only(up) || gate.Args[0] != up.Args[0] {
			continue
		}
		var fused *graph.Value
		var err error
		switch {
		case is(gate, plainMatmuls...) && is(up, plainMatmuls...):
			fused, err = r.fuse("gate/up→swiglu", "matmul_swiglu", v.Name, nil,
				[]*graph.Value{gate.Args[0], gate.Args[1], up.Args[1]}, gate, up)
		case is(gate, expertMatmuls...) && is(up, expertMatmuls...) && gate.Args[2] == up.Args[2]:
			fused, err = r.fuse("expert gate/up→swiglu", "expert_matmul_swiglu", v.Name, nil,
				[]*graph.Value{gate.Args[0], gate.Args[1], up.Args[1], gate.Args[2]}, gate, up)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if err := r.replace(v, fused); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseRouter folds the router's projection into the routing: matmul_router computes the
// E logits and picks the top k in one dispatch (E = 256 logits fit one threadgroup).
func fuseRouter(u *Unit) error {
	r := newRewriter(u, "fuse-router")
	for _, v := range u.Graph.Values {
		if !is(v, "router") || !r.free(v) {
			continue
		}
		logits := v.Args[0]
		if !is(logits, plainMatmuls...) || !r.only(logits) {
			continue
		}
		if err := r.fuseInto(v, "matmul→router", "matmul_router", v.Name, graph.Attrs{"k": v.Attrs["k"]},
			logits.Args, logits); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// routerMatvec marks, for a target with a device-scope fence (CUDA), each matmul_router
// that router_q8 takes (one token, q8 weights: decode's router) with
// gpu.AttrRouterMatvec, so expand-for-backend keeps it whole: one launch instead of the
// projection and the router, two dependent stages per MoE layer. Metal has no such fence
// and keeps the two.
func routerMatvec(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil || !t.GPU.DeviceFence {
		return err
	}
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	for _, v := range u.Graph.Values {
		if v.Op != "matmul_router" {
			continue
		}
		if in, _ := valueOperands(v, bind); !gpu.RouterQ8Shape(v.Attrs, in) {
			continue
		}
		markForKernel(u, v, gpu.AttrRouterMatvec, "router-matvec")
	}
	return nil
}

// fuseMoECombine folds the experts' down projection into the weighted combine:
// expert_matmul_combine accumulates Σ_j w_j·y_j as the rows are produced, so the
// [T, k, H] per-expert outputs never go to memory.
func fuseMoECombine(u *Unit) error {
	r := newRewriter(u, "fuse-moe-combine")
	for _, v := range u.Graph.Values {
		if !is(v, "moe_combine") || !r.free(v) {
			continue
		}
		y := v.Args[0]
		if !is(y, expertMatmuls...) || !r.only(y) {
			continue
		}
		if err := r.fuseInto(v, "expert down→moe_combine", "expert_matmul_combine", v.Name, nil,
			[]*graph.Value{y.Args[0], y.Args[1], y.Args[2], v.Args[1]}, y); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseSharedGate folds add(other, mul(matmul(x, W), sigmoid(gate))) — the shared expert's
// down projection, scaled by sigmoid(shared_expert_gate) and added to the routed output —
// into matmul_gated_add: the sigmoid, the scale and the add run in the projection's
// epilogue.
func fuseSharedGate(u *Unit) error {
	r := newRewriter(u, "fuse-shared-gate")
	for _, v := range u.Graph.Values {
		if !is(v, "add") || !r.free(v) {
			continue
		}
		for _, side := range []int{1, 0} {
			scaled, other := v.Args[side], v.Args[1-side]
			if !is(scaled, "mul") || !r.only(scaled) || !other.Type.Equal(v.Type) {
				continue
			}
			proj, sig := scaled.Args[0], scaled.Args[1]
			if !is(proj, plainMatmuls...) || !is(sig, "sigmoid") || !r.only(proj) || !r.only(sig) {
				continue
			}
			fused, err := r.fuse("add(mul(matmul, sigmoid))", "matmul_gated_add", v.Name, nil,
				[]*graph.Value{proj.Args[0], proj.Args[1], sig.Args[0], other}, scaled, proj, sig)
			if err != nil {
				// Shapes this op does not take (a gate that is not one value per row):
				// leave the pattern unfused.
				continue
			}
			if err := r.replace(v, fused); err != nil {
				return err
			}
			break
		}
	}
	r.finish()
	return nil
}

// fuseSharedExpert makes the shared expert one more slot of the routed experts' fused
// ops. It matches what fuse-swiglu, fuse-moe-combine and fuse-shared-gate leave:
//
//	matmul_gated_add(matmul_swiglu(h, Sg, Su), Sd, gate,
//	                 expert_matmul_combine(expert_matmul_swiglu(h, Wg, Wu, ids), Wd, ids, weights))
//
// and rewrites it as expert_matmul_swiglu_shared(h, Wg, Wu, ids, Sg, Su) →
// expert_matmul_combine_shared(routed, Wd, ids, weights, shared, Sd, gate): the shared
// projections run beside the routed ones instead of in dispatches of their own, and
// matmul_gated_add's stage after the combine is gone. The gate (the shared_expert_gate
// projection) stays what it was, a dispatch off the chain.
func fuseSharedExpert(u *Unit) error {
	r := newRewriter(u, "fuse-shared-expert")
	for _, v := range u.Graph.Values {
		if !is(v, "matmul_gated_add") || !r.free(v) {
			continue
		}
		sharedAct, sharedDown, gate, combine := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
		if !is(sharedAct, "matmul_swiglu") || !is(combine, "expert_matmul_combine") || !r.only(sharedAct) || !r.only(combine) {
			continue
		}
		routedAct, ids := combine.Args[0], combine.Args[2]
		if !is(routedAct, "expert_matmul_swiglu") || !r.only(routedAct) || routedAct.Args[3] != ids || routedAct.Args[0] != sharedAct.Args[0] {
			continue
		}
		acts, err := r.fuse("shared swiglu→expert slot", "expert_matmul_swiglu_shared", routedAct.Name, nil,
			[]*graph.Value{routedAct.Args[0], routedAct.Args[1], routedAct.Args[2], ids, sharedAct.Args[1], sharedAct.Args[2]},
			routedAct, sharedAct)
		if err != nil {
			return err
		}
		routed, shared := r.elem(acts, 0, routedAct.Name), r.elem(acts, 1, sharedAct.Name)
		if err := r.fuseInto(v, "shared down→expert slot", "expert_matmul_combine_shared", v.Name, nil,
			[]*graph.Value{routed, combine.Args[1], ids, combine.Args[3], shared, sharedDown, gate}, combine); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// fuseExpertRouting moves the routing into the routed experts' gate/up dispatch: from
//
//	matmul_router(h, Wr) → (weights, ids); expert_matmul_swiglu_shared(h, …, ids, …);
//	gate = matmul(h, Wsg) read by expert_matmul_combine_shared
//
// to the router's projection alone, logits = matmul(h, Wr), and
// expert_route_swiglu_shared(h, logits, …, Wsg) {k} → (weights, ids, routed, shared,
// gate): each of its groups routes its token from the logits (softmax, top-k,
// renormalise) before its expert's rows, and the shared expert's groups compute the
// gate. On a GPU, where matmul_router is the projection and the router in two stages,
// this takes a stage and a dispatch (the router) and the gate's dispatch out of every
// MoE block; the CPU runs the same work in one dispatch fewer.
func fuseExpertRouting(u *Unit) error {
	r := newRewriter(u, "fuse-expert-routing")
	for _, v := range u.Graph.Values {
		if !is(v, "expert_matmul_swiglu_shared") || !r.free(v) {
			continue
		}
		x, ids := v.Args[0], v.Args[3]
		if !is(ids, graph.OpSelect) || !is(ids.Args[0], "matmul_router") || !r.free(ids.Args[0]) {
			continue
		}
		route := ids.Args[0]
		if route.Args[0] != x {
			continue
		}
		var combine *graph.Value
		for _, s := range r.users[v.ID] {
			for _, c := range r.users[s.ID] {
				if is(c, "expert_matmul_combine_shared") {
					combine = c
				}
			}
		}
		if combine == nil {
			continue
		}
		gate := combine.Args[6]
		if !is(gate, plainMatmuls...) || gate.Args[0] != x || !r.free(gate) {
			continue
		}
		logits, err := r.fuse("router projection", matmulOpForWeight(route.Args[1]), sibling(route.Name, "router_logits"), nil,
			[]*graph.Value{x, route.Args[1]})
		if err != nil {
			return err
		}
		fused, err := r.fuse("route→experts", "expert_route_swiglu_shared", v.Name, graph.Attrs{"k": route.Attrs["k"]},
			[]*graph.Value{x, logits, v.Args[1], v.Args[2], v.Args[4], v.Args[5], gate.Args[1]}, route, v)
		if err != nil {
			return err
		}
		// The tuples' selects take the fused op's elements: (weights, ids) of the router,
		// (routed, shared) of the experts, then the gate.
		for _, tp := range []struct {
			base  int
			tuple *graph.Value
		}{{0, route}, {2, v}} {
			base, tuple := tp.base, tp.tuple
			for _, s := range r.users[tuple.ID] {
				if !is(s, graph.OpSelect) {
					return fmt.Errorf("fuse-expert-routing: %s uses the tuple %s other than through select", s.Ref(), tuple.Ref())
				}
				i := base + s.Attrs.Int("index")
				if err := r.replace(s, r.elem(fused, i, s.Name)); err != nil {
					return err
				}
			}
		}
		if err := r.replace(gate, r.elem(fused, 4, gate.Name)); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}

// matmulOpForWeight is the unfused projection op for a weight: qmatmul for q4/q8.
func matmulOpForWeight(w *graph.Value) string {
	if w.Type.DType.Quantized() {
		return "qmatmul"
	}
	return "matmul"
}
