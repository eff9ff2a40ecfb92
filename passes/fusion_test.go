package passes_test

import (
	"fmt"
	"math/rand"
	"testing"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/ops"
	"pistil/passes"
)

// The decode fusion passes, each tested for meaning (the graph just before the pass and
// just after it compute the same logits and states on the tiny golden checkpoints, MLX
// 4-bit and Hugging Face bf16) and for firing where expected (the tiny model has 6 Gated
// DeltaNet layers and 2 attention layers, each with an MoE block).

type fusionCase struct {
	pass  string
	fused map[string]int // fused op → how many the pass makes in the tiny model
	gone  []string       // unfused ops none of which may remain
}

const tinyGDN, tinyAttention, tinyLayers = 6, 2, 8

var fusionCases = []fusionCase{
	{"fuse-gdn-gates", map[string]int{"gdn_gates": tinyGDN}, []string{"softplus", "exp", "neg"}},
	{"fuse-conv-silu", map[string]int{"conv1d_silu": tinyGDN}, []string{"conv1d", "silu"}},
	{"fuse-slice-l2", map[string]int{"slice_l2_norm": 2 * tinyGDN}, []string{"l2_norm"}},
	{"fuse-conv-l2", map[string]int{"conv1d_silu_l2": tinyGDN}, []string{"slice_l2_norm", "conv1d_silu"}},
	{"fuse-norm-out-proj", map[string]int{"gated_rms_norm_matmul": tinyGDN}, []string{"gated_rms_norm"}},
	{"fuse-qk-norm-rope", map[string]int{"rms_norm_rope": 2 * tinyAttention}, []string{"rope"}},
	{"fuse-slice-rope", map[string]int{"slice_rms_norm_rope": tinyAttention}, nil},
	{"fuse-rope-append", map[string]int{"rms_norm_rope_append": tinyAttention}, nil},
	{"fuse-attn-gate", map[string]int{"sigmoid_gate_matmul": tinyAttention}, nil},
	{"fuse-swiglu", map[string]int{"matmul_swiglu": tinyLayers, "expert_matmul_swiglu": tinyLayers}, []string{"swiglu"}},
	{"fuse-router", map[string]int{"matmul_router": tinyLayers}, []string{"router"}},
	{"fuse-moe-combine", map[string]int{"expert_matmul_combine": tinyLayers}, []string{"moe_combine", "expert_matmul", "expert_qmatmul"}},
	{"fuse-shared-gate", map[string]int{"matmul_gated_add": tinyLayers}, nil},
	{"fuse-shared-expert", map[string]int{"expert_matmul_swiglu_shared": tinyLayers, "expert_matmul_combine_shared": tinyLayers},
		[]string{"matmul_gated_add", "matmul_swiglu", "expert_matmul_swiglu", "expert_matmul_combine"}},
	{"fuse-expert-routing", map[string]int{"expert_route_swiglu_shared": tinyLayers}, []string{"matmul_router", "expert_matmul_swiglu_shared"}},
	// GDN: in_proj_qkv, z, b, a; attention: q, k, v.
	{"fuse-projections", map[string]int{"matmuls": tinyGDN + tinyAttention}, nil},
	// Every norm but layer 0's input norm reads a residual add, and the final norm.
	{"fuse-add-norm", map[string]int{"add_rms_norm": 2 * tinyLayers}, []string{"add"}},
}

func TestFusionPassesKeepTheAnswer(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		ck := openTiny(t, layout)
		g := buildTiny(t, ck, true)
		phase := passes.Phase{Name: "prefill", Tokens: 5}
		rng := rand.New(rand.NewSource(17))
		bind := graph.Bindings{T: 5, C: 0, N: 8}
		tokens := randomTokens(rng, 5, ck.Config().VocabSize)
		states := zeroStates(g, bind)
		for _, c := range fusionCases {
			t.Run(layout+"/"+c.pass, func(t *testing.T) {
				before := runUntil(t, g, phase, passes.Config{Off: map[string]bool{c.pass: true}}, c.pass)
				// On explicitly: some fusions are off by default (measured slower on a GPU).
				after := runUntil(t, g, phase, passes.Config{Off: map[string]bool{c.pass: false}}, c.pass)
				for op, want := range c.fused {
					if got := countOps(after.Graph, op); got != want {
						t.Errorf("%d %s after %s, want %d", got, op, c.pass, want)
					}
				}
				for _, op := range c.gone {
					if n := countOps(after.Graph, op); n != 0 {
						t.Errorf("%d %s left after %s", n, op, c.pass)
					}
				}
				if a, b := countDispatches(after.Graph), countDispatches(before.Graph); a >= b {
					t.Errorf("%s left %d dispatching values, before it %d: nothing fused", c.pass, a, b)
				}
				// The fused references do the unfused float32 arithmetic in the same order;
				// the bound only allows a platform that contracts a*b+c into one rounding.
				compareOutputs(t, c.pass, interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 1e-6)
			})
		}
	}
}

// Every fusion applies to the dequant→matmul form too (fuse-dequant off): the fused ops
// take f32 weights. The whole pipeline without fuse-dequant must still compute what -O0
// computes, from a non-empty state (a decode step after a prefill).
func TestFusionsWithoutFuseDequant(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, true)
	rng := rand.New(rand.NewSource(19))
	noDequant := passes.Config{Off: map[string]bool{"fuse-dequant": true, "fuse-expert-routing": false, "fuse-gdn-prologue": false}}
	states := zeroStates(g, graph.Bindings{N: 8})
	ref := zeroStates(g, graph.Bindings{N: 8})
	pos := 0
	for step, T := range []int{4, 1} {
		phase := passes.Phase{Name: "prefill", Tokens: T}
		fused := runUntil(t, g, phase, noDequant, "reorder")
		plain := runUntil(t, g, phase, passes.O0(), "reorder")
		if countOps(fused.Graph, "dequant") == 0 || countOps(fused.Graph, "expert_route_swiglu_shared") == 0 {
			t.Fatal("want dequants feeding fused ops")
		}
		bind := graph.Bindings{T: T, C: pos, N: 8}
		tokens := randomTokens(rng, T, ck.Config().VocabSize)
		got := interpret(t, fused.Graph, ck, tokens, states, bind)
		want := interpret(t, plain.Graph, ck, tokens, ref, bind)
		compareOutputs(t, fmt.Sprintf("step %d", step), got, want, 1e-5)
		for name := range states {
			states[name], ref[name] = got[name], want[name]
		}
		pos += T
	}
}

// countDispatches counts the values that become dispatches (not sources, not views).
func countDispatches(g *graph.Graph) int {
	n := 0
	for _, v := range g.Values {
		if def, ok := ops.Default.Lookup(v.Op); ok && !def.Has(graph.Source) && !def.Has(graph.View) {
			n++
		}
	}
	return n
}

// fuse-gdn-prologue fuses decode steps only: on a one-token step from a state that is not
// zero (random conv and recurrent states, a context of 3), the graph before and after it
// compute the same logits and the same next states, conv state included; on a prefill
// chunk it leaves the graph as it is.
func TestGDNPrologueKeepsTheAnswer(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		t.Run(layout, func(t *testing.T) {
			ck := openTiny(t, layout)
			g := buildTiny(t, ck, true)
			bind, states, tokens := randomDecodeStep(g, ck, 23)
			decode := passes.Phase{Name: "decode", Tokens: 1}
			before := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-gdn-prologue": true}}, "fuse-gdn-prologue")
			after := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-gdn-prologue": false}}, "fuse-gdn-prologue")
			for _, op := range []string{"gated_delta_step", "conv_state_shift"} {
				if n := countOps(after.Graph, op); n != tinyGDN {
					t.Errorf("%d %s after fuse-gdn-prologue, want %d", n, op, tinyGDN)
				}
			}
			for _, op := range []string{"gated_delta", "conv1d_silu", "slice_l2_norm", "gdn_gates", "slice"} {
				if n := countOps(after.Graph, op); op == "slice" && n != countOps(before.Graph, op)-tinyGDN || op != "slice" && n != 0 {
					t.Errorf("%d %s left after fuse-gdn-prologue", n, op)
				}
			}
			if a, b := countDispatches(after.Graph), countDispatches(before.Graph); a != b-4*tinyGDN {
				t.Errorf("%d dispatching values after fuse-gdn-prologue, %d before: want 4 fewer per GDN layer", a, b)
			}
			compareOutputs(t, "decode", interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 1e-6)

			prefill := runUntil(t, g, passes.Phase{Name: "prefill", Tokens: 5}, passes.Config{}, "fuse-gdn-prologue")
			if n := countOps(prefill.Graph, "gated_delta_step"); n != 0 {
				t.Errorf("%d gated_delta_step in a 5-token prefill", n)
			}
		})
	}
}

// fuse-conv-l2 on a one-token step from a state that is not zero (random conv and
// recurrent states, a context of 3): the graph before and after it compute the same
// logits and next states; with fuse-gdn-prologue on as well, the prologue takes the conv
// and the norms and fuse-conv-l2 folds nothing.
func TestConvL2KeepsTheAnswer(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		t.Run(layout, func(t *testing.T) {
			ck := openTiny(t, layout)
			g := buildTiny(t, ck, true)
			bind, states, tokens := randomDecodeStep(g, ck, 29)
			decode := passes.Phase{Name: "decode", Tokens: 1}
			before := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-conv-l2": true}}, "fuse-conv-l2")
			after := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-conv-l2": false}}, "fuse-conv-l2")
			if n := countOps(after.Graph, "conv1d_silu_l2"); n != tinyGDN {
				t.Errorf("%d conv1d_silu_l2 after fuse-conv-l2, want %d", n, tinyGDN)
			}
			for _, op := range []string{"conv1d_silu", "slice_l2_norm"} {
				if n := countOps(after.Graph, op); n != 0 {
					t.Errorf("%d %s left after fuse-conv-l2", n, op)
				}
			}
			if a, b := countDispatches(after.Graph), countDispatches(before.Graph); a != b-2*tinyGDN {
				t.Errorf("%d dispatching values after fuse-conv-l2, %d before: want 2 fewer per GDN layer", a, b)
			}
			compareOutputs(t, "decode", interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 1e-6)

			both := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-conv-l2": false, "fuse-gdn-prologue": false}}, "fuse-conv-l2")
			if n, m := countOps(both.Graph, "conv1d_silu_l2"), countOps(both.Graph, "gated_delta_step"); n != 0 || m != tinyGDN {
				t.Errorf("with fuse-gdn-prologue on: %d conv1d_silu_l2 and %d gated_delta_step, want 0 and %d", n, m, tinyGDN)
			}
		})
	}
}

// fuse-delta-norm fuses decode steps only: on a one-token step from random conv and
// recurrent states, the graph before and after it (and after fuse-norm-out-proj, which
// then leaves the output projection a plain matmul) compute the same logits and next
// states; with fuse-gdn-prologue on it folds nothing, and a prefill chunk keeps the
// unfused ops.
func TestDeltaNormKeepsTheAnswer(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		t.Run(layout, func(t *testing.T) {
			ck := openTiny(t, layout)
			g := buildTiny(t, ck, true)
			bind, states, tokens := randomDecodeStep(g, ck, 29)
			decode := passes.Phase{Name: "decode", Tokens: 1}
			off := passes.Config{Off: map[string]bool{"fuse-delta-norm": true}}
			on := passes.Config{Off: map[string]bool{"fuse-delta-norm": false}}
			for _, until := range []string{"fuse-delta-norm", "fuse-norm-out-proj"} {
				before := runUntil(t, g, decode, off, until)
				after := runUntil(t, g, decode, on, until)
				if n := countOps(after.Graph, "gated_delta_norm"); n != tinyGDN {
					t.Errorf("until %s: %d gated_delta_norm, want %d", until, n, tinyGDN)
				}
				for _, op := range []string{"gated_delta", "gated_rms_norm", "gated_rms_norm_matmul"} {
					if n := countOps(after.Graph, op); n != 0 {
						t.Errorf("until %s: %d %s left after fuse-delta-norm", until, n, op)
					}
				}
				wantFewer := tinyGDN // the norm
				if until == "fuse-norm-out-proj" {
					wantFewer = 0 // before: gated_delta + gated_rms_norm_matmul; after: gated_delta_norm + the projection
				}
				if a, b := countDispatches(after.Graph), countDispatches(before.Graph); a != b-wantFewer {
					t.Errorf("until %s: %d dispatching values after fuse-delta-norm, %d before: want %d fewer", until, a, b, wantFewer)
				}
				compareOutputs(t, "decode until "+until, interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 1e-6)
			}

			both := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"fuse-delta-norm": false, "fuse-gdn-prologue": false}}, "fuse-delta-norm")
			if n, m := countOps(both.Graph, "gated_delta_norm"), countOps(both.Graph, "gated_delta_step"); n != 0 || m != tinyGDN {
				t.Errorf("with fuse-gdn-prologue on: %d gated_delta_norm and %d gated_delta_step, want 0 and %d", n, m, tinyGDN)
			}
			prefill := runUntil(t, g, passes.Phase{Name: "prefill", Tokens: 5}, on, "fuse-delta-norm")
			if n := countOps(prefill.Graph, "gated_delta_norm"); n != 0 {
				t.Errorf("%d gated_delta_norm in a 5-token prefill", n)
			}
		})
	}
}

// randomDecodeStep is a one-token decode step after a context of 3 from states that are
// not zero (every conv and recurrent state element drawn at 0.3 times a normal) and one
// random token, from seed: what a decode fusion must compute the same before and after.
func randomDecodeStep(g *graph.Graph, ck *checkpoint.Checkpoint, seed int64) (graph.Bindings, map[string]*ops.Tensor, *ops.Tensor) {
	rng := rand.New(rand.NewSource(seed))
	bind := graph.Bindings{T: 1, C: 3, N: 8}
	states := zeroStates(g, bind)
	for _, st := range states {
		for i := range st.F32() {
			st.F32()[i] = float32(rng.NormFloat64()) * 0.3
		}
	}
	return bind, states, randomTokens(rng, 1, ck.Config().VocabSize)
}
