package gpu

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The shared expert as one more slot of the routed experts' decode kernels
// (fuse-shared-expert): expert_matmul_swiglu_shared and expert_matmul_combine_shared run
// as one kernel each where the routed part has one (a few routed slots of q4 stacks) and
// the shared part is a q4 matrix-vector product of the same rows; otherwise (prefill, bf16
// weights) expand-for-backend turns them back into the routed op and the shared op.

func supportsExpertSwiGLUShared(_ graph.Attrs, in, _ []Operand) bool {
	x, wg, wu, ids, sg, su := in[0], in[1], in[2], in[3], in[4], in[5]
	return len(x.Shape) == 2 && expertQ4(x, ids, wg, wu) && decodeQ4(x, sg, su) && slices.Equal(sg.Shape, su.Shape)
}

// lowerExpertSwiGLUShared: the routed slots' tiles, then one slot per token for the shared
// expert, in one grid.
func lowerExpertSwiGLUShared(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if !supportsExpertSwiGLUShared(d.Attrs, in, out) {
		return nil, fmt.Errorf("expert_matmul_swiglu_shared: no single kernel for x %v, experts %v, shared %v; the plan should have expanded it", in[0].Shape, in[1].Shape, in[4].Shape)
	}
	x, wg, wu, ids, sg, su := in[0], in[1], in[2], in[3], in[4], in[5]
	T, k := ids.Shape[0], ids.Shape[1]
	M, K, SM := wg.Shape[1], wg.Shape[2], sg.Shape[0]
	args := kernels.ExpertArgs{W: wg.W, W2: wu.W, X: x.Addr, Ids: ids.Addr, Y: out[0].Addr, T: int32(T), TopK: int32(k),
		E: int32(wg.Shape[0]), M: int32(M), K: int32(K), SW: sg.W, SW2: su.W, SY: out[1].Addr, SM: int32(SM)}
	return matvecLaunch(c, d, kernels.KernelExpertMVSwiGLUSharedQ4, max(M, SM), K, T*k+T, args, wg, wu, sg, su)
}

func supportsExpertCombineShared(_ graph.Attrs, in, _ []Operand) bool {
	x, w, ids, xs, ws, gate := in[0], in[1], in[2], in[4], in[5], in[6]
	return expertQ4(x, ids, w) && decodeQ4(xs, ws) && ws.Shape[0] == w.Shape[1] && prod(gate.Shape) == ids.Shape[0] && gate.DType == graph.F32
}

// lowerExpertCombineShared: the routed down projections and the shared one, weighted and
// summed per token; the group is fitted to the (expert, chunk) pairs so that every thread
// takes one.
func lowerExpertCombineShared(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if !supportsExpertCombineShared(d.Attrs, in, out) {
		return nil, fmt.Errorf("expert_matmul_combine_shared: no single kernel for x %v, experts %v, shared %v; the plan should have expanded it", in[0].Shape, in[1].Shape, in[5].Shape)
	}
	x, w, ids, weights, xs, ws, gate := in[0], in[1], in[2], in[3], in[4], in[5], in[6]
	T, k, M, K, SK := ids.Shape[0], ids.Shape[1], w.Shape[1], w.Shape[2], ws.Shape[1]
	args := kernels.ExpertArgs{W: w.W, X: x.Addr, Ids: ids.Addr, Y: out[0].Addr, Weights: weights.Addr, T: int32(T),
		TopK: int32(k), E: int32(w.Shape[0]), M: int32(M), K: int32(K), SW: ws.W, SX: xs.Addr, SGate: gate.Addr, SK: int32(SK)}
	if len(x.Shape) == 3 {
		args.XPerSlot = 1
	}
	pairs := k*(K/32) + SK/32
	threads := min(kernels.MatvecCombineSharedThreads, max(kernels.MatvecThreads, ceilDiv(pairs, 32)*32))
	return newKernel(kernels.KernelExpertMVCombineSharedQ4, [3]int{ceilDiv(M, c.t.CombineRows), T, 1}, threads, args)
}

// q8Row says whether w is one q8 row of K that q8_row_dot multiplies.
func q8Row(w Operand, K int) bool {
	return len(w.Shape) == 2 && w.Shape[0] == 1 && w.Shape[1] == K && w.DType == graph.Q8 && K%16 == 0 && w.W.Group%16 == 0
}

func supportsExpertRouteSwiGLUShared(attrs graph.Attrs, in, out []Operand) bool {
	x, logits, wsg := in[0], in[1], in[6]
	if !supportsExpertSwiGLUShared(attrs, []Operand{x, in[2], in[3], out[1], in[4], in[5]}, out[2:4]) || len(logits.Shape) != 2 {
		return false
	}
	E, k := logits.Shape[1], attrs.Int("k")
	return logits.DType == graph.F32 && E == in[2].Shape[0] && E <= kernels.RouterMaxE && k >= 1 && k <= min(E, kernels.RouterMaxK) &&
		q8Row(wsg, x.Shape[1])
}

// lowerExpertRouteSwiGLUShared: expert_matvec_swiglu_shared_q4's grid, each routed
// group routing its token first; the ids operand the routed groups would read is the
// op's own ids result.
func lowerExpertRouteSwiGLUShared(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if !supportsExpertRouteSwiGLUShared(d.Attrs, in, out) {
		return nil, fmt.Errorf("expert_route_swiglu_shared: no single kernel for x %v, logits %v, experts %v, shared %v, gate %s%v; the plan should have expanded it",
			in[0].Shape, in[1].Shape, in[2].Shape, in[4].Shape, in[6].DType, in[6].Shape)
	}
	x, logits, wg, wu, sg, su, wsg := in[0], in[1], in[2], in[3], in[4], in[5], in[6]
	T, E, k := x.Shape[0], logits.Shape[1], d.Attrs.Int("k")
	M, K, SM := wg.Shape[1], wg.Shape[2], sg.Shape[0]
	args := kernels.ExpertArgs{W: wg.W, W2: wu.W, X: x.Addr, Ids: out[1].Addr, Weights: out[0].Addr, Y: out[2].Addr, T: int32(T), TopK: int32(k),
		E: int32(E), M: int32(M), K: int32(K), SW: sg.W, SW2: su.W, SY: out[3].Addr, SM: int32(SM), Logits: logits.Addr, SGW: wsg.W, SGate: out[4].Addr}
	return newKernel(kernels.KernelExpertMVSwiGLURoutedQ4, matvecGrid(max(M, SM), K, T*k+T), kernels.MatvecThreads, args)
}
