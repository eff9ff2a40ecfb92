package gpu

import (
	"fmt"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// matmul_router as one kernel, router_q8 (ops/kernels/moe_cuda.k): decode's router
// projection (q8 weights, one token) and its routing in one launch instead of matvec_q8
// and router, two dependent stages of every MoE layer. The projection's groups compute
// their logits as matvec_q8 does and the last group to finish routes, which needs a
// device-scope fence: on a target without one (Metal) the op expands as before.

// AttrRouterMatvec (int 1) asks for router_q8 where it applies (the compiler's
// router-matvec pass); unmarked, matmul_router expands.
const AttrRouterMatvec = "router_matvec"

// deviceFenceOps are the fused ops whose one-kernel form needs Target.DeviceFence: on
// other targets Supports says no, so expand-for-backend expands them.
var deviceFenceOps = map[string]bool{"matmul_router": true}

func init() {
	fusedKernels["matmul_router"] = fusedKernel{supportsRouterQ8, lowerRouterQ8}
}

// RouterQ8Shape says whether router_q8 takes a matmul_router of these operands: one
// token x [1, K] (16-byte aligned) against a q8 weight [E, K] in 16-code chunks that
// never straddle a quantization group (matvec_q8's loads), at most kernels.RouterMaxE
// experts and a top k of 1..min(E, kernels.RouterMaxK) (route_token's registers).
func RouterQ8Shape(attrs graph.Attrs, in []Operand) bool {
	if len(in) != 2 || len(in[1].Shape) != 2 {
		return false
	}
	x, w := in[0], in[1]
	E, K, k := w.Shape[0], w.Shape[1], attrs.Int("k")
	return w.DType == graph.Q8 && K > 0 && K%16 == 0 && w.W.Group%16 == 0 && prod(x.Shape) == K && x.Addr%16 == 0 &&
		E >= 1 && E <= kernels.RouterMaxE && k >= 1 && k <= min(E, kernels.RouterMaxK)
}

func supportsRouterQ8(attrs graph.Attrs, in, _ []Operand) bool {
	return attrs.Int(AttrRouterMatvec) != 0 && RouterQ8Shape(attrs, in)
}

// lowerRouterQ8: one group per kernels.MatvecQ8Rows logits, as matvec_q8 launches.
func lowerRouterQ8(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	if !c.t.DeviceFence {
		return nil, fmt.Errorf("matmul_router: router_q8 needs a device-scope fence, which the %s target has not", c.t.Name)
	}
	if !supportsRouterQ8(d.Attrs, in, out) {
		x, w := in[0], in[1]
		return nil, fmt.Errorf("matmul_router: x %s%v against weight %s%v (group %d), top %d is not one token against q8 weights of at most %d rows; the plan should have expanded it",
			x.DType, x.Shape, w.DType, w.Shape, w.W.Group, d.Attrs.Int("k"), kernels.RouterMaxE)
	}
	x, w := in[0], in[1]
	E, K := w.Shape[0], w.Shape[1]
	return newKernel(kernels.KernelRouterQ8, [3]int{ceilDiv(E, kernels.MatvecQ8Rows), 1, 1}, kernels.MatvecThreads, kernels.RouterQ8Args{
		W: w.W, X: x.Addr, Weights: out[0].Addr, Ids: out[1].Addr, E: int32(E), K: int32(K), TopK: int32(d.Attrs.Int("k"))})
}
