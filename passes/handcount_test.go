package passes_test

import (
	"math"
	"strings"
	"testing"

	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// The hand count: the built-in Qwen3.6-35B-A3B (MLX 4-bit, BF16 KV and conv state)
// compiled for decode must give the numbers derived here from model-spec.md and from the
// graph's structure, not read off the compiler's output.

// q4 and q8 are MLX affine bytes for rows×cols weights, group 64: the packed codes plus a
// bf16 scale and a bf16 bias per group of 64 (model-spec.md §4).
func q4(rows, cols int64) int64 { return rows*cols/2 + rows*cols/64*4 }
func q8(rows, cols int64) int64 { return rows*cols + rows*cols/64*4 }

const (
	H, V                = 2048, 248320
	layers              = 40
	gdnLayers, attLayer = 30, 10
)

// expectedWeightBytes re-derives model-spec.md §6.3 term by term.
func expectedWeightBytes() int64 {
	// GDN layer: in_proj_qkv [8192,H], in_proj_z [4096,H], in_proj_b and in_proj_a [32,H],
	// out_proj [H,4096] at 4 bits; conv1d [8192,4] bf16, dt_bias [32] bf16, A_log [32] f32,
	// linear_attn.norm [128] bf16.
	gdn := q4(8192, H) + q4(4096, H) + 2*q4(32, H) + q4(H, 4096) + 8192*4*2 + 32*2 + 32*4 + 128*2
	// Attention layer: q_proj [8192,H], k_proj and v_proj [512,H], o_proj [H,4096] at 4
	// bits; q_norm and k_norm [256] bf16.
	att := q4(8192, H) + 2*q4(512, H) + q4(H, 4096) + 2*256*2
	// MoE, every layer: 8 routed experts of gate and up [512,H] and down [H,512], the
	// shared expert of the same shapes, the router [256,H] and the shared-expert gate [1,H]
	// at 8 bits.
	expert := 2*q4(512, H) + q4(H, 512)
	moe := 8*expert + expert + q8(256, H) + q8(1, H)
	// input_layernorm and post_attention_layernorm [H] bf16 per layer, the final norm.
	norms := int64(layers*2*H*2 + H*2)
	// lm_head [V,H] at 4 bits; one embedding row [H] at 4 bits per token.
	return gdnLayers*gdn + attLayer*att + layers*moe + norms + q4(V, H) + q4(1, H)
}

func TestHandCountDecode(t *testing.T) {
	if got := expectedWeightBytes(); got != 1_669_563_648 {
		t.Fatalf("the hand derivation gives %d B, model-spec.md §6.3 says 1,669,563,648 B", got)
	}
	g, err := qwen35moe.Build(qwen35moe.Default(), qwen35moe.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decode := passes.Phase{Name: "decode", Tokens: 1, Context: 4096}
	p, err := passes.Compile(g, ops.Default, decode, passes.Config{Check: true, Off: everyFusionOn()})
	if err != nil {
		t.Fatal(err)
	}
	tot := p.Totals
	if want := expectedWeightBytes(); math.Abs(float64(tot.WeightBytesRead-want)) > 0.01*float64(want) {
		t.Errorf("weight bytes per decode token %d, want %d within 1%%", tot.WeightBytesRead, want)
	}
	// KV cache: 10 attention layers × (K and V) × 2 KV heads × head_dim 256 × 2 B (bf16).
	if want := int64(attLayer * 2 * 2 * 256 * 2); tot.KVBytesPerToken != want || want != 20_480 {
		t.Errorf("KV bytes per token %d, want %d", tot.KVBytesPerToken, want)
	}
	// Recurrent state: 30 GDN layers × [32 heads, 128, 128] f32 = 60 MiB; conv state:
	// 30 × [3, 8192] bf16.
	recurrent, conv := int64(gdnLayers*32*128*128*4), int64(gdnLayers*3*8192*2)
	if recurrent != 62_914_560 || conv != 1_474_560 {
		t.Fatalf("state derivation: recurrent %d conv %d", recurrent, conv)
	}
	split := p.StateSplit()
	if split["recurrent_state"] != recurrent || split["conv_state"] != conv || tot.StateBytes != recurrent+conv {
		t.Errorf("state %d (%v), want recurrent %d + conv %d", tot.StateBytes, split, recurrent, conv)
	}

	// The decode plan with every optional pass on (the default), derived per layer.
	// Sources and views (reshape, select, last_row, and slice_view: slice-views makes one
	// of every slice of one token's contiguous run) dispatch nothing. A residual add is
	// folded into the norm that reads its sum (add_rms_norm), so it is counted there: the
	// mixer's residual add in the MoE's post_attention_layernorm, the MoE's in the next
	// layer's input_layernorm (or the final norm).
	//   GDN mixer: input norm, matmuls (in_proj_qkv, z, b, a), gated_delta_step (conv,
	//     q/k split and norms, v, gates and the delta rule), conv_state_shift,
	//     gated_rms_norm_matmul (norm + out_proj)                               = 5
	//   attention mixer: input norm, matmuls (q, k, v), slice (gate),
	//     slice_rms_norm_rope (q, read in place), rms_norm_rope_append (k, into the
	//     cache), kv_append (v), attention, sigmoid_gate_matmul (output gate +
	//     o_proj)                                                                = 8
	//   MoE: add_rms_norm (attention residual + post_attention_layernorm), the
	//     router's projection, expert_route_swiglu_shared (routing, routed and shared
	//     gate/up, the shared_expert_gate projection), expert_matmul_combine_shared
	//     (routed and gated shared down projections)                             = 4
	//   model: embed, final add_rms_norm, lm_head                              = 3
	const gdnMixer, attMixer, moe, model = 5, 8, 4, 3
	wantDispatches := gdnLayers*(gdnMixer+moe) + attLayer*(attMixer+moe) + model
	if tot.Dispatches != wantDispatches {
		t.Errorf("decode dispatches %d, want 30*(5+4) + 10*(8+4) + 3 = %d", tot.Dispatches, wantDispatches)
	}
	// Longest dependency chain (dispatches on the longest path; arena reuse lengthens no
	// path because plan-memory reuses a block only from a later level than every
	// dispatch that touched it):
	//   GDN mixer: norm → matmuls → gated_delta_step → gated_rms_norm_matmul   = 4
	//     (conv_state_shift follows gated_delta_step, which reads the conv state it
	//     updates, and nothing in the step reads its result; z joins at the output
	//     projection)
	//   attention mixer: norm → matmuls → slice_rms_norm_rope → attention →
	//     sigmoid_gate_matmul (k side: matmuls → rms_norm_rope_append, v side:
	//     matmuls → kv_append, both reach attention at the same depth)           = 5
	//   MoE: add_rms_norm → router projection → expert_route_swiglu_shared →
	//     expert_matmul_combine_shared                                          = 4
	//   model: embed before layer 0; final norm and lm_head after layer 39     = 3
	const gdnChain, attChain, moeChain = 4, 5, 4
	wantChain := gdnLayers*(gdnChain+moeChain) + attLayer*(attChain+moeChain) + model
	if tot.LongestChain != wantChain {
		t.Errorf("decode longest chain %d, want 30*(4+4) + 10*(5+4) + 3 = %d", tot.LongestChain, wantChain)
	}
	if got := plan.LongestChain(len(p.Dispatches), p.Edges); got != wantChain {
		t.Errorf("longest chain from the reduced edges %d, want %d", got, wantChain)
	}
	// reorder puts each dependency level in one group, so the barriers are exactly the
	// stages the chain needs.
	if tot.Groups != wantChain || tot.Barriers != wantChain-1 {
		t.Errorf("decode groups %d (barriers %d), want one group per level of the chain: %d", tot.Groups, tot.Barriers, wantChain)
	}
	// The published reference runtime (Lily) launches 795 kernels in 555 stages.
	if wantDispatches >= 795 || wantChain >= 555 {
		t.Errorf("the derivation gives %d dispatches in %d stages: not fewer than Lily's 795 in 555", wantDispatches, wantChain)
	}

	// Each fusion switched off alone, what it gives back, derived by hand. fuse-gdn-prologue
	// folds the fused ops of fuse-gdn-gates, fuse-conv-silu and fuse-slice-l2, so with any
	// of those off it folds nothing and gives its own share back too: 3 dispatches and 2
	// stages per GDN layer (the v slice it also folds is a view: slice-views). fuse-conv-l2
	// (on here, after the prologue) folds what the prologue leaves of those: with the
	// prologue off, or only fuse-gdn-gates off, conv1d_silu_l2 takes the conv and the two
	// norms, and the prologue's share is 1 dispatch and 1 stage per GDN layer.
	fusions := attLayer + gdnLayers // every layer has one MoE block
	prologue, prologueChain := 3*gdnLayers, 2*gdnLayers
	convL2Left, convL2LeftChain := 1*gdnLayers, 1*gdnLayers
	ablations := []struct {
		pass              string
		dispatches, chain int
		why               string
	}{
		{"fuse-gdn-prologue", convL2Left, convL2LeftChain,
			"conv1d_silu_l2 and gdn_gates before the delta rule (the v slice a view of the conv's output) instead of gated_delta_step and conv_state_shift; conv1d_silu_l2 is a stage before it. fuse-delta-norm (on here) then takes gated_delta with its norm and fuse-norm-out-proj finds none: gated_delta_norm and the projection instead of gated_delta and gated_rms_norm_matmul, the same count"},
		{"fuse-conv-l2", 0, 0, "the prologue has taken the conv and the norms, so it folds nothing"},
		{"fuse-delta-norm", 0, 0, "the prologue has taken gated_delta, so it folds nothing"},
		{"fuse-gdn-gates", 5*gdnLayers + convL2Left, gdnLayers + prologueChain,
			"add, softplus, mul, exp, neg and sigmoid instead of gdn_gates, and the prologue staged (conv1d_silu_l2, gated_delta); add→softplus→mul reaches gated_delta at depth 6, two past the q path through conv1d_silu_l2"},
		{"fuse-norm-out-proj", gdnLayers, gdnLayers, "gated_rms_norm before out_proj, a stage of its own"},
		{"fuse-qk-norm-rope", 4 * attLayer, 2 * attLayer,
			"rms_norm and rope for q and for k, with the query slice and the key append as dispatches again (neither fold has an rms_norm_rope to take): two more stages on either path to attention"},
		{"fuse-slice-rope", attLayer, attLayer, "the query slice before its rms_norm_rope, one more stage on the q path"},
		{"fuse-rope-append", attLayer, attLayer, "the key append after its rms_norm_rope, one more stage on the k path"},
		{"fuse-attn-gate", 2 * attLayer, attLayer, "sigmoid and mul before o_proj; the mul is a stage after attention"},
		{"fuse-conv-silu", gdnLayers + prologue, gdnLayers + prologueChain, "a silu after the conv, on the q path"},
		{"fuse-slice-l2", prologue, prologueChain, "l2_norm for q and for k instead of slice_l2_norm (the slices views: slice-views), the same stages"},
		{"fuse-swiglu", 5 * fusions, 2 * fusions,
			"routed gate, up and swiglu instead of one; the shared gate and up join the shared_expert_gate projection in one matmuls, plus a swiglu: two dispatches either way; the routed swiglu is a stage; and fuse-shared-expert finds no matmul_swiglu (its 2 dispatches and 1 stage), so fuse-expert-routing nothing (its dispatch)"},
		{"fuse-router", fusions, fusions,
			"the router's projection joins the shared_expert_gate projection in one matmuls, so the count stays, but the router waits a stage for it; and fuse-expert-routing finds no matmul_router (its dispatch)"},
		{"fuse-moe-combine", 4 * fusions, 2 * fusions,
			"moe_combine after the experts' down projection, on the chain; and fuse-shared-expert finds no expert_matmul_combine (its 2 dispatches and 1 stage), so fuse-expert-routing nothing (its dispatch)"},
		{"fuse-shared-gate", 6 * fusions, fusions,
			"the shared down projection, sigmoid, mul and add instead of one, the add in matmul_gated_add's stage; and fuse-shared-expert finds no matmul_gated_add (its 2 dispatches and 1 stage), so fuse-expert-routing nothing (its dispatch)"},
		{"fuse-shared-expert", 3 * fusions, fusions,
			"matmul_swiglu and matmul_gated_add of the shared expert as dispatches of their own, matmul_gated_add a stage after the combine; and fuse-expert-routing finds no expert_matmul_swiglu_shared (its dispatch)"},
		{"fuse-expert-routing", fusions, 0,
			"matmul_router and the shared_expert_gate projection instead of the router's projection: one dispatch more, in the same stages on the CPU (on a GPU matmul_router is two stages)"},
		{"fuse-projections", 3*gdnLayers + 2*attLayer, 0, "4 in_proj and 3 q/k/v projections instead of one each, all in one stage"},
		{"fuse-add-norm", layers + (layers - 1) + 1, 2 * layers,
			"every norm after a residual add (all but layer 0's input norm, plus the final norm) waits a stage for a separate add"},
		{"slice-views", 0, 0, "no slice of the fully fused plan is contiguous (the GDN prologue takes the v slice; the attention gate's slice is strided, per head), so nothing changes"},
		{"fuse-dequant", gdnLayers*13 + attLayer*12 + 1, 0, "the dequant dispatches counted below for -O0; each depends on its weight alone"},
	}
	for _, a := range ablations {
		cfg := passes.Config{Check: true, Off: everyFusionOn()}
		cfg.Off[a.pass] = true
		off, err := passes.Compile(g, ops.Default, decode, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := off.Totals.Dispatches; got != wantDispatches+a.dispatches {
			t.Errorf("-pass=%s/off: %d dispatches, want %d + %d (%s)", a.pass, got, wantDispatches, a.dispatches, a.why)
		}
		if got := off.Totals.LongestChain; got != wantChain+a.chain {
			t.Errorf("-pass=%s/off: longest chain %d, want %d + %d (%s)", a.pass, got, wantChain, a.chain, a.why)
		}
		// Without fuse-dequant a dequant reads whole expert stacks; every other fusion
		// reads exactly what the unfused ops read.
		if a.pass != "fuse-dequant" && off.Totals.WeightBytesRead != tot.WeightBytesRead {
			t.Errorf("-pass=%s/off: weight bytes %d, want %d: fusion must not change what is read", a.pass, off.Totals.WeightBytesRead, tot.WeightBytesRead)
		}
	}

	// With fuse-dequant alone (every other fusion off), per layer, as declared:
	//   GDN mixer: input_layernorm, in_proj_qkv, in_proj_z, in_proj_b, sigmoid(b),
	//     in_proj_a, conv1d, silu, 2 l2_norms (q, k), exp(A_log), neg, add(a +
	//     dt_bias), softplus, mul (g), gated_delta, gated_rms_norm, out_proj, residual
	//     add (the q, k and v slices are views: slice-views stays on here)       = 19
	//   attention mixer: input_layernorm, q_proj, 2 slices (query, gate), k_proj, v_proj,
	//     q_norm, k_norm, 2 ropes, 2 kv_appends, attention, sigmoid(gate), mul, o_proj,
	//     residual add                                                        = 17
	//   MoE: post_attention_layernorm, router matmul, router, expert gate, expert up,
	//     swiglu, expert down, moe_combine, shared gate, shared up, swiglu, shared down,
	//     shared_expert_gate matmul, sigmoid, mul, add (routed + shared), residual add = 17
	// and chains
	//   GDN mixer: norm → in_proj_qkv → conv1d → silu → l2_norm → gated_delta →
	//     gated_rms_norm → out_proj → residual add                               = 9
	//   attention mixer: norm → q_proj → slice → q_norm → rope → attention → mul →
	//     o_proj → residual add                                                  = 9
	//   MoE: norm → router matmul → router → expert gate/up → swiglu → expert down →
	//     moe_combine → add → residual add                                       = 9
	const gdnMixer0, attMixer0, moe0, gdnChain0, attChain0, moeChain0 = 19, 17, 17, 9, 9, 9
	unfused := gdnLayers*(gdnMixer0+moe0) + attLayer*(attMixer0+moe0) + model
	unfusedChain := gdnLayers*(gdnChain0+moeChain0) + attLayer*(attChain0+moeChain0) + model
	dequantOnly := passes.Config{Check: true, Off: map[string]bool{}}
	for _, ps := range passes.Passes {
		if !ps.Required && ps.Name != "fuse-dequant" && ps.Name != "reorder" && ps.Name != "slice-views" {
			dequantOnly.Off[ps.Name] = true
		}
	}
	base, err := passes.Compile(g, ops.Default, decode, dequantOnly)
	if err != nil {
		t.Fatal(err)
	}
	if base.Totals.Dispatches != unfused || base.Totals.LongestChain != unfusedChain {
		t.Errorf("fuse-dequant only: %d dispatches, chain %d; want 30*(19+17) + 10*(17+17) + 3 = %d, 30*(9+9) + 10*(9+9) + 3 = %d",
			base.Totals.Dispatches, base.Totals.LongestChain, unfused, unfusedChain)
	}

	// Without any optional pass every quantized matmul weight gets its own dequant
	// dispatch: GDN in_proj_qkv, z, b, a, out_proj (5); attention q, k, v, o (4); MoE
	// router, 3 expert stacks, 3 shared expert matrices, shared_expert_gate (8); lm_head
	// (1). The embedding reads its table directly.
	o0, err := passes.Compile(g, ops.Default, decode, passes.O0())
	if err != nil {
		t.Fatal(err)
	}
	dequants := gdnLayers*(5+8) + attLayer*(4+8) + 1
	// -O0 has slice-views off too: the GDN mixer's q, k and v slices are copies again,
	// the q slice a stage on the chain.
	slices, sliceChain := 3*gdnLayers, gdnLayers
	if o0.Totals.Dispatches != unfused+slices+dequants {
		t.Errorf("-O0 decode dispatches %d, want %d + %d slices + %d dequants", o0.Totals.Dispatches, unfused, slices, dequants)
	}
	// A dequant depends on its weight alone, so it never lengthens the chain: the chain
	// stays the same without fusion, even though the dequantized f32 copies share arena
	// memory.
	if o0.Totals.LongestChain != unfusedChain+sliceChain {
		t.Errorf("-O0 decode longest chain %d, want %d + %d", o0.Totals.LongestChain, unfusedChain, sliceChain)
	}
	t.Logf("decode: %d dispatches, %d groups, longest chain %d; fuse-dequant only: %d, %d, %d; -O0: %d dispatches, %d groups, longest chain %d",
		tot.Dispatches, tot.Groups, tot.LongestChain, base.Totals.Dispatches, base.Totals.Groups, base.Totals.LongestChain,
		o0.Totals.Dispatches, o0.Totals.Groups, o0.Totals.LongestChain)
}

// On a GPU, gated_rms_norm_matmul expands into the norm and the projection (gated-norm-matvec
// is off by default), so there fuse-delta-norm saves the norm, a stage of its own: one
// dispatch and one stage per GDN layer of the default CUDA decode plan (fuse-gdn-prologue
// off, so this pass finds gated_delta).
func TestHandCountDeltaNormOnCUDA(t *testing.T) {
	g, err := qwen35moe.Build(qwen35moe.Default(), qwen35moe.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decode := passes.Phase{Name: "decode", Tokens: 1, Context: 4096, Backend: "cuda"}
	base, err := passes.Compile(g, ops.Default, decode, passes.Config{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	fused, err := passes.Compile(g, ops.Default, decode, passes.Config{Check: true, Off: map[string]bool{"fuse-delta-norm": false}})
	if err != nil {
		t.Fatal(err)
	}
	b, f := base.Totals, fused.Totals
	if b.Dispatches-f.Dispatches != gdnLayers || b.Groups-f.Groups != gdnLayers || b.LongestChain-f.LongestChain != gdnLayers {
		t.Errorf("fuse-delta-norm on CUDA: %d dispatches, %d groups, chain %d; default %d, %d, %d: want %d fewer of each",
			f.Dispatches, f.Groups, f.LongestChain, b.Dispatches, b.Groups, b.LongestChain, gdnLayers)
	}
	if f.WeightBytesRead != b.WeightBytesRead {
		t.Errorf("fuse-delta-norm on CUDA reads %d weight bytes, default %d: fusion must not change what is read", f.WeightBytesRead, b.WeightBytesRead)
	}
	t.Logf("CUDA decode: default %d dispatches, %d groups; fuse-delta-norm on %d, %d", b.Dispatches, b.Groups, f.Dispatches, f.Groups)
}

// On CUDA, norm-matvec folds each MoE layer's post-attention norm into its router's q8
// projection, one dispatch and one stage fewer per layer (the norm stood alone between the
// residual add and the router); norm-matvec-q4 then folds the other norms (every layer's
// input norm but the first's, the final norm) into their q4 projections, one more each.
// Neither changes the weight bytes read.
func TestHandCountNormMatvecOnCUDA(t *testing.T) {
	g, err := qwen35moe.Build(qwen35moe.Default(), qwen35moe.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decode := passes.Phase{Name: "decode", Tokens: 1, Context: 4096, Backend: "cuda"}
	compile := func(off map[string]bool) plan.Totals {
		p, err := passes.Compile(g, ops.Default, decode, passes.Config{Check: true, Off: off})
		if err != nil {
			t.Fatal(err)
		}
		return p.Totals
	}
	none := compile(map[string]bool{"norm-matvec": true})
	routers := compile(nil)
	all := compile(map[string]bool{"norm-matvec-q4": false})
	for _, c := range []struct {
		what     string
		from, to plan.Totals
		fewer    int
	}{{"norm-matvec", none, routers, layers}, {"norm-matvec-q4 after it", routers, all, (layers - 1) + 1}} {
		if c.from.Dispatches-c.to.Dispatches != c.fewer || c.from.Groups-c.to.Groups != c.fewer || c.from.LongestChain-c.to.LongestChain != c.fewer {
			t.Errorf("%s on CUDA: %d dispatches, %d groups, chain %d, from %d, %d, %d: want %d fewer of each",
				c.what, c.to.Dispatches, c.to.Groups, c.to.LongestChain, c.from.Dispatches, c.from.Groups, c.from.LongestChain, c.fewer)
		}
		if c.to.WeightBytesRead != c.from.WeightBytesRead {
			t.Errorf("%s on CUDA reads %d weight bytes, %d without: fusion must not change what is read", c.what, c.to.WeightBytesRead, c.from.WeightBytesRead)
		}
	}
	t.Logf("CUDA decode: %d dispatches, %d groups without the norm folds; %d, %d with norm-matvec; %d, %d with norm-matvec-q4 too",
		none.Dispatches, none.Groups, routers.Dispatches, routers.Groups, all.Dispatches, all.Groups)
}

// BenchmarkCompileBuiltin measures what `pistil compile` does for the built-in model:
// build the graph once, compile decode and a 512-token prefill.
func BenchmarkCompileBuiltin(b *testing.B) {
	for range b.N {
		g, err := qwen35moe.Build(qwen35moe.Default(), qwen35moe.BuildOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, ph := range []passes.Phase{{Name: "decode", Tokens: 1, Context: 4096}, {Name: "prefill", Tokens: 512, Context: 4096, LastLogitsOnly: true}} {
			if _, err := passes.Compile(g, ops.Default, ph, passes.Config{}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// everyFusionOn switches on the fusion passes that are off by default (measured slower on
// the H200, pipeline.toml says why): the hand counts derive the fully fused CPU plan.
func everyFusionOn() map[string]bool {
	on := map[string]bool{}
	for _, p := range passes.Passes {
		if p.DefaultOff && strings.HasPrefix(p.Name, "fuse-") {
			on[p.Name] = false
		}
	}
	return on
}
