//go:build linux

package cuda

import (
	"strings"
	"testing"

	"pistil/ops/kernels"
	"pistil/plan"
)

// A plan whose router_q8 dispatches share the kernel's counter must order them by its
// edges; one that leaves two unordered is refused at Load, naming both.
func TestRouterQ8DispatchesMustBeOrdered(t *testing.T) {
	synthetic := func(edges ...plan.Edge) *plan.Plan {
		return &plan.Plan{Phase: "decode", Backend: "cuda", Tokens: 1,
			Dispatches: []plan.Dispatch{
				{Index: 0, Op: "matmul_router", Label: "layers.0.mlp.gate", Kernel: kernels.KernelRouterQ8},
				{Index: 1, Op: "expert_matmul_swiglu", Label: "layers.0.mlp.experts", Kernel: kernels.KernelExpertMVSwiGLUQ4},
				{Index: 2, Op: "rms_norm", Label: "layers.1.norm", Kernel: kernels.KernelRMSNorm},
				{Index: 3, Op: "matmul_router", Label: "layers.1.mlp.gate", Kernel: kernels.KernelRouterQ8},
			},
			Edges: edges}
	}
	if err := checkOps(synthetic(plan.Edge{From: 0, To: 1}, plan.Edge{From: 1, To: 2}, plan.Edge{From: 2, To: 3})); err != nil {
		t.Fatalf("routers ordered through a chain of edges: %v", err)
	}
	err := checkOps(synthetic(plan.Edge{From: 0, To: 1}, plan.Edge{From: 2, To: 3}))
	if err == nil {
		t.Fatal("routers with no path between them were accepted")
	}
	for _, want := range []string{"dispatches 0 (layers.0.mlp.gate) and 3 (layers.1.mlp.gate)", "router-matvec/off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
