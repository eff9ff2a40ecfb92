package ops

import (
	"testing"

	"pistil/graph"
)

// contractOps is the op list of the contract between packages; every one must be in the
// table with the parts its kind needs.
var contractOps = []string{
	"input", "weight", "state", "reshape", "select", "last_row",
	"embed", "dequant", "matmul", "qmatmul", "rms_norm", "l2_norm", "gated_rms_norm", "rope",
	"kv_append", "attention", "conv1d", "gated_delta",
	"add", "mul", "neg", "exp", "sigmoid", "silu", "softplus", "swiglu", "slice",
	"router", "expert_matmul", "expert_qmatmul", "moe_combine", "argmax",
	// fused ops (fused_*.go), produced by the optional fusion passes
	"matmuls", "matmul_swiglu", "matmul_gated_add", "matmul_router", "expert_matmul_swiglu",
	"expert_matmul_combine", "add_rms_norm", "gdn_gates", "conv1d_silu", "slice_l2_norm",
	"rms_norm_rope", "slice_rms_norm_rope", "rms_norm_rope_append", "sigmoid_gate_matmul", "gated_rms_norm_matmul",
	"expert_matmul_swiglu_shared", "expert_matmul_combine_shared", "expert_route_swiglu_shared",
	// the GPU form of attention for decode (split-attention)
	"attention_partial", "attention_merge",
	// the fused GDN decode step and the conv state update it leaves (fuse-gdn-prologue)
	"gated_delta_step", "conv_state_shift",
	// the conv with the q/k L2 norms in its epilogue (fuse-conv-l2)
	"conv1d_silu_l2",
	// the delta rule with the gated norm of its output (fuse-delta-norm)
	"gated_delta_norm",
	// a contiguous slice read in place (slice-views)
	"slice_view",
	// the residual add and its norm inside the projections of the normed row (norm-matvec)
	"add_rms_norm_matmuls",
}

func TestTableCoversContract(t *testing.T) {
	for _, name := range contractOps {
		info, ok := Default.Info(name)
		if !ok {
			t.Errorf("op %s is not registered", name)
			continue
		}
		if info.Doc == "" || info.Infer == nil || info.Cost == nil {
			t.Errorf("op %s lacks Doc, Infer or Cost", name)
		}
		noRef := info.Has(graph.Source) || info.Has(graph.View)
		if noRef != (info.Ref == nil) {
			t.Errorf("op %s: Ref present = %v, want %v", name, info.Ref != nil, !noRef)
		}
	}
	if got, want := len(Default.Names()), len(contractOps); got != want {
		t.Errorf("table has %d ops, contract lists %d: %v", got, want, Default.Names())
	}
}
