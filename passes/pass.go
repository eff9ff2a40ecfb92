// Package passes compiles a model graph into per-phase plans: a table of named passes,
// each required or optional, run by a driver that can check, time and dump after every
// pass. Required passes alone (-O0) always give a correct plan; every optional pass is an
// ablation with its own off switch and a test that it does not change the answer.
package passes

import (
	"fmt"

	"pistil/graph"
	"pistil/ops"
	"pistil/plan"
)

// OpTable is what passes need of the op table: definitions for graph.Check and the full
// entries for costs and fused-op rules. ops.Default implements it.
type OpTable interface {
	graph.OpSet
	Info(name string) (*ops.Info, bool)
}

// Phase says which plan is being compiled.
type Phase struct {
	// Name is "decode" or "prefill".
	Name string
	// Tokens is the step's T: 1 for decode, the chunk size for prefill.
	Tokens int
	// Context is the context length C the plan's costs assume (attention reads C+T rows of
	// KV cache); it does not change the plan itself.
	Context int
	// LastLogitsOnly computes logits for the last token only: specialise-phase moves a
	// last_row in front of the lm_head matmul when the graph computes every row.
	LastLogitsOnly bool
	// Backend names the target the plan is for ("cpu", "cuda", "metal"; "" is the CPU):
	// a GPU target's plan expands the fused ops it has no kernel for and names the
	// kernel, grid and group size of every dispatch.
	Backend string
}

// Unit is what the passes transform: the graph, then the analyses that later passes add.
type Unit struct {
	Graph *graph.Graph
	Phase Phase
	Ops   OpTable
	// Config is the compilation's configuration (the settings passes read beyond their
	// switches: Config.KeyBlockSplitFrom).
	Config Config
	// Memory is set by plan-memory: where every value lives.
	Memory *Memory
	// Schedule is set by schedule: read/write sets, concurrent groups and the DAG.
	Schedule *Schedule
	// Plan is set by lower.
	Plan *plan.Plan
	// Ran lists the passes that ran, in order.
	Ran []string
	// Stats are counters passes record (rules fired, placements), shown in dumps.
	Stats map[string]int
	// enabled names the passes Run runs under Config (passOn): a pass whose choice
	// depends on what a later pass will do asks here.
	enabled map[string]bool
}

func (u *Unit) count(stat string, n int) {
	if u.Stats == nil {
		u.Stats = map[string]int{}
	}
	u.Stats[stat] += n
}

// Pass is one entry of the pass table.
type Pass struct {
	Name string
	Fn   func(u *Unit) error
	// Required passes always run; the others can be switched off (and are, under -O0).
	Required bool
	// DefaultOff passes run only when switched on (a [passes] key or -pass=NAME/on):
	// optimisations that are correct but not yet faster everywhere.
	DefaultOff bool
	Doc        string
}

// Passes is the pipeline in order. Adding a pass is one line here plus its ordering
// constraints below; flags, dumps, timing and checking come from the driver.
var Passes = []Pass{
	{Name: "specialise-phase", Fn: specialisePhase, Required: true,
		Doc: "bind T to the phase's token count; prefill may keep only the last row of logits"},
	{Name: "fuse-dequant", Fn: fuseDequant,
		Doc: "dequant→matmul becomes qmatmul, dequant→expert_matmul becomes expert_qmatmul"},
	{Name: "fuse-gdn-gates", Fn: fuseGDNGates,
		Doc: "add(a, dt_bias)→softplus→mul(-exp(A_log)) and sigmoid(b) become one gdn_gates"},
	{Name: "fuse-conv-silu", Fn: fuseConvSiLU,
		Doc: "conv1d→silu becomes conv1d_silu"},
	{Name: "fuse-slice-l2", Fn: fuseSliceL2,
		Doc: "slice→reshape→l2_norm (the q and k split of the conv output) becomes slice_l2_norm"},
	{Name: "fuse-gdn-prologue", Fn: fuseGDNPrologue, DefaultOff: true,
		Doc: "decode: conv1d_silu, the q/k slice_l2_norms, the v slice and gdn_gates fold into the recurrent step (gated_delta_step); the conv state's update becomes conv_state_shift, off the critical path"},
	{Name: "fuse-conv-l2", Fn: fuseConvL2,
		Doc: "the q and k slice_l2_norms that feed a gated_delta fold into the conv1d_silu they read (conv1d_silu_l2): on a GPU the norms run in the decode conv kernel's epilogue"},
	{Name: "fuse-delta-norm", Fn: fuseDeltaNorm, DefaultOff: true,
		Doc: "decode: gated_delta→gated_rms_norm (the GDN's gated norm of the step's output) becomes gated_delta_norm, the norm inside the recurrent step; the output projection then reads the normed output as a plain matmul. Leaves gated_delta_step (fuse-gdn-prologue) alone"},
	{Name: "fuse-norm-out-proj", Fn: fuseNormOutProj,
		Doc: "gated_rms_norm→reshape→matmul (the GDN output projection) becomes gated_rms_norm_matmul"},
	{Name: "gated-norm-matvec", Fn: gatedNormMatvec, DefaultOff: true,
		Doc: "a GPU target: gated_rms_norm_matmul of a decode row runs as one kernel (gated_rms_norm_matvec_q4) instead of expanding into the norm and the projection"},
	{Name: "fuse-qk-norm-rope", Fn: fuseQKNormRoPE,
		Doc: "rms_norm→rope (attention's q and k) becomes rms_norm_rope"},
	{Name: "fuse-slice-rope", Fn: fuseSliceRoPE,
		Doc: "slice→rms_norm_rope (attention's query heads cut from q_proj's output) becomes slice_rms_norm_rope"},
	{Name: "fuse-rope-append", Fn: fuseRoPEAppend,
		Doc: "rms_norm_rope→kv_append (attention's keys) becomes rms_norm_rope_append"},
	{Name: "fuse-attn-gate", Fn: fuseAttnGate,
		Doc: "matmul(mul(a, sigmoid(g))) (attention's output gate and o_proj) becomes sigmoid_gate_matmul"},
	{Name: "fuse-swiglu", Fn: fuseSwiGLU,
		Doc: "gate and up projections of one input read by a swiglu become matmul_swiglu / expert_matmul_swiglu"},
	{Name: "fuse-router", Fn: fuseRouter,
		Doc: "the router's projection→router becomes matmul_router"},
	{Name: "fuse-moe-combine", Fn: fuseMoECombine,
		Doc: "the experts' down projection→moe_combine becomes expert_matmul_combine"},
	{Name: "fuse-shared-gate", Fn: fuseSharedGate,
		Doc: "add(other, matmul·sigmoid(gate)) (the shared expert's output) becomes matmul_gated_add"},
	{Name: "fuse-shared-expert", Fn: fuseSharedExpert,
		Doc: "the shared expert becomes one more slot of expert_matmul_swiglu / expert_matmul_combine (…_shared): its gate/up beside the routed ones, its gated down projection in the combine"},
	{Name: "fuse-expert-routing", Fn: fuseExpertRouting, DefaultOff: true,
		Doc: "the router's softmax/top-k and the shared expert's gate projection move into expert_matmul_swiglu_shared (expert_route_swiglu_shared); the router's projection stays a matmul"},
	{Name: "fuse-projections", Fn: fuseProjections,
		Doc: "projections that read the same input become one matmuls dispatch (horizontal fusion)"},
	{Name: "fuse-add-norm", Fn: fuseAddNorm,
		Doc: "a residual add→rms_norm of its sum becomes add_rms_norm"},
	{Name: "router-matvec", Fn: routerMatvec, DefaultOff: true,
		Doc: "a CUDA target: matmul_router of one token with q8 weights runs as one kernel (router_q8): the projection's last group to finish routes"},
	{Name: "expand-for-backend", Fn: expandForBackend, Required: true,
		Doc: "a GPU target: fused ops it has no single kernel for (by shape) become the ops they fuse, each a planned dispatch"},
	{Name: "slice-views", Fn: sliceViews,
		Doc: "a slice whose range is one contiguous run of its argument (a decode step's slice of one token's row) becomes a slice_view on the argument's bytes: no copy, no dispatch"},
	{Name: "norm-matvec", Fn: normMatvec,
		Doc: "a CUDA decode step: add_rms_norm and the q8 projection (the router's) with the most rows of those reading its normed row become add_rms_norm_matmuls, the norm inside matvec_q8_norm (each group sums the row's squares itself)"},
	{Name: "norm-matvec-q4", Fn: normMatvecQ4, DefaultOff: true,
		Doc: "a CUDA decode step: the same for q4 projections (the layers' input projections, the lm_head) on the staged tensor-core twin with the norm, where mma-matvec and staged-matvec take them; off by default, slower on the H100"},
	{Name: "tile-attention", Fn: tileAttention,
		Doc: "a GPU target: attention over more than one token runs as attention_prefill (query tiles x key tiles, online softmax)"},
	{Name: "split-attention", Fn: splitAttention,
		Doc: "a GPU target: attention with few (kv head, token) pairs becomes attention_partial over key ranges + attention_merge"},
	{Name: "reorder", Fn: reorderByDepth,
		Doc: "sort dispatches by dependency level (as late as possible): one concurrent group per level"},
	{Name: "plan-memory", Fn: planMemory, Required: true,
		Doc: "buffers for weights, state, inputs and outputs; liveness-packed scratch arena"},
	{Name: "schedule", Fn: schedule, Required: true,
		Doc: "byte-range read/write sets, concurrent groups and barriers, minimal dependency DAG"},
	{Name: "lower", Fn: lower, Required: true,
		Doc: "emit the phase's plan with costs and totals"},
	{Name: "batched-matvec", Fn: batchedMatvec, DefaultOff: true,
		Doc: "a GPU target: q4 matmuls of prefill steps of 9-128 rows run as batched matrix-vector tiles (matvec_q4_rows)"},
	{Name: "expert-gather", Fn: expertGather, DefaultOff: true,
		Doc: "a GPU target: routed-expert q4 matmuls of prefill steps with at most 8 rows per expert run gathered by expert, in batched matrix-vector tiles"},
	{Name: "expert-per-slot", Fn: expertPerSlot,
		Doc: "a GPU target: routed-expert q4 matmuls of prefill steps of up to 512 slots run one matrix-vector tile per slot (the decode kernel)"},
	{Name: "tensor-cores", Fn: tensorCores,
		Doc: "a GPU target with tensor cores: prefill matmuls and routed-expert matmuls (the shapes of the SIMT tiles that the short-step passes left) run on the mma kernels"},
	{Name: "mma-split-k", Fn: mmaSplitK,
		Doc: "tensor-core matmuls whose 64x64 tiles would not fill the GPU run with each tile's k-steps shared out among its warps (matmul_mma_splitk)"},
	{Name: "split-k-only-idle", Fn: splitKOnlyIdle,
		Doc: "with mma-wide-rows, the matmuls mma-split-k took whose 64x64 tiles still give every multiprocessor a group run on the wide tile instead (512-token chunks' output projections): prefill +6.0-7.1% at 512 tokens on an H100"},
	{Name: "expert-tiles", Fn: expertTiles,
		Doc: "the mma expert tiles' height (16, 32 or 64 routed rows) from the rows each expert receives; off: 16"},
	{Name: "expert-split-k", Fn: expertSplitK, DefaultOff: true,
		Doc: "tensor-core routed-expert matmuls of at most 16 rows per expert run in tiles of 32 weight rows with each tile's k-steps shared out among its warps (expert_mma_splitk); off by default since the q4-only expert kernels measured faster without it"},
	{Name: "busy-expert-tiles", Fn: busyExpertTiles,
		Doc: "with mma-wide-rows, the mma expert tiles of 16 routed rows grow to the wide 32-row tile where more than one expert in ten would receive over 16 rows (512-token chunks of the full model), so those experts read their weights once: prefill +3.4% to +5.4% at 512 tokens on an H100"},
	{Name: "mma-wide-rows", Fn: mmaWideRows,
		Doc: "tensor-core dense matmuls (not split-k) and routed-expert matmuls in tiles of 32 routed rows run in tiles of 128 weight rows, two row blocks a warp (matmul_mma_wide, expert_mma32w): prefill +4-6% on an H100"},
	{Name: "mma-matvec", Fn: mmaMatvec,
		Doc: "a GPU target with tensor cores: the q4 matrix-vector products (decode's projections, routed and shared experts' gate/up, lm_head) run on their tensor-core twins"},
	{Name: "imma-matvec", Fn: immaMatvec, DefaultOff: true,
		Doc: "the tensor-core matrix-vector twins take the codes as u8 and the activations as three s8 parts per k-step into an integer mma (fewer instructions per code; the parts hold x to 2^-24 of the step's largest value)"},
	{Name: "staged-matvec", Fn: stagedMatvec,
		Doc: "the tensor-core matrix-vector twins copy each group's weight tile into group memory with cp.async (no registers held, the whole tile in flight; issued before the programmatic-launch wait unless the router chooses the tile) instead of each warp loading its own"},
	{Name: "mma-attention", Fn: mmaAttention,
		Doc: "a GPU target with tensor cores: tiled prefill attention over a float32 or bf16 cache runs both its products on the tensor cores (attention_prefill_mma, tf32 split in three)"},
	{Name: "fa2-attention", Fn: fa2Attention,
		Doc: "a GPU target with tensor cores: tiled prefill attention over a bf16 cache with head dims of 64, 128 or 256 runs on attention_prefill_fa2, each warp owning 16 query rows whole (FlashAttention-2's form: no partial scores meet in group memory, P stays in registers, a group's K/V tile serves 128 rows); needs mma-attention"},
	{Name: "mma-decode-attention", Fn: mmaDecodeAttention,
		Doc: "a GPU target with tensor cores: attention that is not tiled for prefill (decode's, whole or split into key ranges) runs on attention_gqa_mma: the group's warps split the head dims, each loading its slice of every key tile straight from the cache into tf32 mma fragments split in three"},
	{Name: "staged-decode-attention", Fn: stagedDecodeAttention, DefaultOff: true,
		Doc: "a GPU target with tensor cores: a decode step's attention on attention_gqa_mma runs as attention_gqa_staged, each lane's share of a key tile copied into group memory by cp.async four tiles ahead (the cache rows earlier steps wrote before the programmatic-launch wait); split-attention then keeps equal key ranges at every context; off by default, slower at 32K on the H100"},
	{Name: "chunked-delta", Fn: chunkedDelta,
		Doc: "a CUDA target: a prefill step's gated_delta runs in chunks of 64 tokens (gated_delta_chunked, the WY/UT form: T / 64 chunk steps of small matrix products instead of T recurrent steps)"},
	{Name: "select-kernels", Fn: selectKernels, Required: true,
		Doc: "a GPU target: the kernel, grid and group size of every dispatch, as the backend will launch it"},
}

// Constraint says pass A must run before pass B, and why. This table documents the
// ordering requirements; it does not override the order of Passes, and a test checks
// that Passes obeys it.
type Constraint struct {
	A, B   string
	Reason string
}

// PassOrder lists every ordering requirement between passes.
var PassOrder = []Constraint{
	{"specialise-phase", "fuse-dequant",
		"fusion decisions are made on concrete shapes, and dumps after fusion should show them"},
	{"specialise-phase", "plan-memory",
		"scratch sizes need T bound; a symbolic T has no byte size"},
	{"fuse-dequant", "plan-memory",
		"fusion deletes the dequantized f32 copies; planning them first would reserve arena space for values that no longer exist"},
	{"fuse-dequant", "reorder",
		"fusion removes dispatches and so changes every value's level"},
	// The fusions below run on concrete shapes, after fuse-dequant (they absorb matmul and
	// qmatmul values, and fuse-dequant knows no rule for a dequant feeding a fused op: run
	// first, they would keep every dequant dispatch alive), and before reorder (they change
	// the dispatch set and so every level).
	{"specialise-phase", "fuse-gdn-gates", "fusion decisions are made on concrete shapes"},
	{"fuse-gdn-gates", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"expand-for-backend", "slice-views", "the expansions of fused ops make slices of their own"},
	{"fuse-slice-l2", "slice-views", "fuse-slice-l2 fuses the q and k slices with their norms; only the copies left become views"},
	{"slice-views", "reorder", "a view is no dispatch, so it changes the levels"},
	{"slice-views", "plan-memory", "plan-memory places the views"},
	{"specialise-phase", "fuse-conv-silu", "fusion decisions are made on concrete shapes"},
	{"fuse-conv-silu", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-conv-silu", "fuse-slice-l2",
		"the q/k slices read the conv's activation: their fused form is the same either way, but dumps read in data-flow order"},
	{"specialise-phase", "fuse-slice-l2", "the reshape's shape attr must have T bound before it becomes the fused op's shape"},
	{"fuse-slice-l2", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-gdn-gates", "fuse-gdn-prologue", "it folds gdn_gates (not the six ops it replaces) into the step"},
	{"fuse-conv-silu", "fuse-gdn-prologue", "it folds conv1d_silu (not conv1d and silu) into the step"},
	{"fuse-slice-l2", "fuse-gdn-prologue", "it folds the q and k slice_l2_norms (not slice, reshape and l2_norm) into the step"},
	{"fuse-gdn-prologue", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-gdn-prologue", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"fuse-conv-silu", "fuse-conv-l2", "it folds conv1d_silu (not conv1d and silu)"},
	{"fuse-slice-l2", "fuse-conv-l2", "it folds the q and k slice_l2_norms (not slice, reshape and l2_norm)"},
	{"fuse-gdn-prologue", "fuse-conv-l2",
		"both fold the same conv1d_silu and q/k norms; the prologue, the larger fold, takes them first, and fuse-conv-l2 only what it left"},
	{"fuse-conv-l2", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-conv-l2", "slice-views", "the v slice must read the fused op's conv output to become a view of it"},
	{"fuse-conv-l2", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"specialise-phase", "fuse-delta-norm", "it fuses one-token steps only, so T must be bound"},
	{"fuse-gdn-prologue", "fuse-delta-norm",
		"the prologue's fold takes gated_delta whole (gated_delta_step) and this pass matches gated_delta alone: in this order, with both on, the prologue folds every decode step and this pass none, so no op is folded twice"},
	{"fuse-delta-norm", "fuse-norm-out-proj",
		"it takes the gated_rms_norm that fuse-norm-out-proj would fold into the output projection, which then stays a plain matmul of the normed output; the other order leaves no norm to fold into the step"},
	{"fuse-delta-norm", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-delta-norm", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"fuse-dequant", "fuse-norm-out-proj", "fuse-norm-out-proj absorbs the out_proj qmatmul; the other order leaves its dequant alive"},
	{"specialise-phase", "fuse-norm-out-proj", "the reshape's shape attr must have T bound before it becomes the fused op's shape"},
	{"fuse-norm-out-proj", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-norm-out-proj", "gated-norm-matvec", "it marks the gated_rms_norm_matmul fuse-norm-out-proj makes"},
	{"gated-norm-matvec", "expand-for-backend", "expand-for-backend keeps a marked gated_rms_norm_matmul whole"},
	{"specialise-phase", "fuse-qk-norm-rope", "fusion decisions are made on concrete shapes"},
	{"fuse-qk-norm-rope", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-qk-norm-rope", "fuse-slice-rope", "it folds the slice into the rms_norm_rope that fuse-qk-norm-rope makes"},
	{"fuse-slice-rope", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-qk-norm-rope", "fuse-rope-append", "it folds the rms_norm_rope that fuse-qk-norm-rope makes into the append"},
	{"fuse-rope-append", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-dequant", "fuse-attn-gate", "fuse-attn-gate absorbs the o_proj qmatmul; the other order leaves its dequant alive"},
	{"fuse-attn-gate", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-dequant", "fuse-swiglu", "fuse-swiglu absorbs the qmatmuls fuse-dequant makes; the other order leaves every dequant dispatch alive"},
	{"fuse-swiglu", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-dequant", "fuse-router", "fuse-router absorbs the router's qmatmul; the other order leaves its dequant alive"},
	{"fuse-router", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-dequant", "fuse-moe-combine", "fuse-moe-combine absorbs the down projection's expert_qmatmul; the other order leaves its dequant alive"},
	{"fuse-moe-combine", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-dequant", "fuse-shared-gate", "fuse-shared-gate absorbs the shared down projection's qmatmul; the other order leaves its dequant alive"},
	{"fuse-shared-gate", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-swiglu", "fuse-shared-expert", "it matches the matmul_swiglu and expert_matmul_swiglu fuse-swiglu makes"},
	{"fuse-moe-combine", "fuse-shared-expert", "it matches the expert_matmul_combine fuse-moe-combine makes"},
	{"fuse-shared-gate", "fuse-shared-expert", "it matches the matmul_gated_add fuse-shared-gate makes"},
	{"fuse-shared-expert", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-shared-expert", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"fuse-router", "fuse-expert-routing", "it matches the matmul_router fuse-router makes"},
	{"fuse-shared-expert", "fuse-expert-routing", "it matches the expert_matmul_swiglu_shared and expert_matmul_combine_shared fuse-shared-expert makes"},
	{"fuse-expert-routing", "fuse-projections",
		"the shared_expert_gate projection it absorbs must not join a matmuls first, and the router projection it leaves must be there for fuse-projections to see"},
	{"fuse-expert-routing", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-expert-routing", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"fuse-router", "router-matvec", "it marks the matmul_router fuse-router makes"},
	{"fuse-expert-routing", "router-matvec", "fuse-expert-routing takes matmul_router apart; only those it leaves are marked"},
	{"router-matvec", "expand-for-backend", "expand-for-backend keeps a marked matmul_router whole"},
	{"fuse-dequant", "fuse-projections", "fuse-projections merges qmatmuls; the other order leaves their dequants alive"},
	{"fuse-swiglu", "fuse-projections",
		"a gate/up pair must become matmul_swiglu (activation in the epilogue), not two results of a matmuls followed by a swiglu dispatch"},
	{"fuse-router", "fuse-projections",
		"the router's projection must fold into matmul_router; merged into a matmuls first, the router would stay a dispatch of its own"},
	{"fuse-shared-gate", "fuse-projections",
		"the shared expert's down projection must fold into matmul_gated_add, not join a matmuls"},
	{"fuse-projections", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-shared-gate", "fuse-add-norm",
		"the routed+shared add belongs to matmul_gated_add; only the residual add that follows it is the norm's"},
	{"fuse-add-norm", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"fuse-add-norm", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"fuse-projections", "expand-for-backend",
		"every fusion pass must have run: expansion undoes the fusions a backend has no kernel for, and a later fusion would make new ones"},
	{"expand-for-backend", "reorder", "expansion adds dispatches and so changes every value's level"},
	{"split-attention", "reorder", "splitting adds a dispatch and so changes every value's level"},
	{"tile-attention", "split-attention", "the split's key ranges are sized from attention_prefill's query tiles, and attention_partial carries the mark"},
	{"expand-for-backend", "tile-attention", "the mark goes on the attention values the plan will run"},
	{"expand-for-backend", "plan-memory", "expanded stages need arena space of their own"},
	{"lower", "select-kernels", "kernels are chosen for the planned operands of each dispatch"},
	{"lower", "tensor-cores", "it marks the plan's dispatches, which lower makes"},
	{"expert-per-slot", "tensor-cores", "the short-step kernels keep the shapes they win on; the tensor cores take the rest"},
	{"batched-matvec", "tensor-cores", "the short-step kernels keep the shapes they win on; the tensor cores take the rest"},
	{"expert-gather", "tensor-cores", "the short-step kernels keep the shapes they win on; the tensor cores take the rest"},
	{"tensor-cores", "expert-tiles", "tiles are sized for the dispatches marked for the tensor cores"},
	{"tensor-cores", "mma-split-k", "it picks among the kernels of the dispatches marked for the tensor cores"},
	{"mma-split-k", "select-kernels", "the kernel choice reads the mark"},
	{"mma-split-k", "split-k-only-idle", "it takes back marks mma-split-k set"},
	{"split-k-only-idle", "mma-wide-rows", "the matmuls it takes the split from get the wide tile"},
	{"split-k-only-idle", "select-kernels", "the kernel choice reads the mark"},
	{"tensor-cores", "select-kernels", "the kernel choice reads the mark"},
	{"lower", "mma-matvec", "it marks the plan's dispatches, which lower makes"},
	{"mma-matvec", "select-kernels", "the kernel choice reads the mark"},
	{"mma-matvec", "imma-matvec", "it marks dispatches mma-matvec marked"},
	{"imma-matvec", "select-kernels", "the kernel choice reads the mark"},
	{"mma-matvec", "staged-matvec", "it marks dispatches mma-matvec marked"},
	{"imma-matvec", "staged-matvec", "the integer form keeps its own loads"},
	{"staged-matvec", "select-kernels", "the kernel choice reads the mark"},
	// norm-matvec and norm-matvec-q4 fold norms into the projections the GPU lowering
	// leaves: after expand-for-backend (the router's qmatmul out of matmul_router), before
	// the plan is laid out, and before the plan passes that mark the q4 form's dispatches.
	{"fuse-add-norm", "norm-matvec", "it folds the add_rms_norms fuse-add-norm makes"},
	{"expand-for-backend", "norm-matvec", "it takes the router's qmatmul that matmul_router expands into on a GPU"},
	{"norm-matvec", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"norm-matvec", "norm-matvec-q4", "each norm goes to one projection: the routers' first"},
	{"fuse-add-norm", "norm-matvec-q4", "it folds the add_rms_norms fuse-add-norm makes"},
	{"expand-for-backend", "norm-matvec-q4", "it reads the projections the GPU lowering leaves"},
	{"norm-matvec-q4", "reorder", "fusion removes dispatches and so changes every value's level"},
	{"norm-matvec-q4", "mma-matvec", "mma-matvec marks the fused op's q4 dispatches for the twins, which the pass counted on"},
	{"lower", "chunked-delta", "it marks the plan's dispatches, which lower makes"},
	{"chunked-delta", "select-kernels", "the kernel choice reads the mark"},
	{"lower", "mma-attention", "it marks the plan's dispatches, which lower makes"},
	{"mma-attention", "select-kernels", "the kernel choice reads the mark"},
	{"mma-attention", "fa2-attention", "it marks dispatches mma-attention marked"},
	{"fa2-attention", "select-kernels", "the kernel choice reads the mark"},
	{"lower", "mma-decode-attention", "it marks the plan's dispatches, which lower makes"},
	{"tile-attention", "mma-decode-attention", "it marks what tile-attention left untiled"},
	{"mma-decode-attention", "select-kernels", "the kernel choice reads the mark"},
	{"mma-decode-attention", "staged-decode-attention", "it marks dispatches mma-decode-attention marked"},
	{"staged-decode-attention", "select-kernels", "the kernel choice reads the mark"},
	{"expert-tiles", "select-kernels", "the kernel choice reads the tile height"},
	{"expert-tiles", "expert-split-k", "it takes the tiles of 16 routed rows"},
	{"expert-split-k", "select-kernels", "the kernel choice reads the mark"},
	{"expert-tiles", "busy-expert-tiles", "it grows the tiles expert-tiles sized"},
	{"expert-split-k", "busy-expert-tiles", "it leaves the split-k expert tiles their 16 rows"},
	{"busy-expert-tiles", "mma-wide-rows", "it takes the tiles of 32 routed rows"},
	{"busy-expert-tiles", "select-kernels", "the kernel choice reads the tile height"},
	{"tensor-cores", "mma-wide-rows", "it picks among the kernels of the dispatches marked for the tensor cores"},
	{"mma-split-k", "mma-wide-rows", "it leaves the split-k matmuls their kernel"},
	{"expert-tiles", "mma-wide-rows", "it takes the tiles of 32 routed rows"},
	{"expert-split-k", "mma-wide-rows", "it leaves the split-k expert tiles their kernel"},
	{"mma-wide-rows", "select-kernels", "the kernel choice reads the mark"},
	{"reorder", "plan-memory",
		"liveness follows list order: memory must be planned for the order the plan will run in"},
	{"plan-memory", "schedule",
		"barriers come from byte ranges, which exist only once every value has a buffer and an offset"},
	{"schedule", "lower",
		"the plan carries the groups, barriers and DAG the schedule computes"},
	{"plan-memory", "lower",
		"dispatch operands are buffer offsets"},
}

// PassNames lists the table's names in order.
func PassNames() []string {
	names := make([]string, len(Passes))
	for i, p := range Passes {
		names[i] = p.Name
	}
	return names
}

func lookupPass(name string) (Pass, bool) {
	for _, p := range Passes {
		if p.Name == name {
			return p, true
		}
	}
	return Pass{}, false
}

// CheckOrder verifies that passes obeys constraints: every named pass exists and every A
// comes before its B.
func CheckOrder(passes []Pass, constraints []Constraint) error {
	pos := map[string]int{}
	for i, p := range passes {
		if _, dup := pos[p.Name]; dup {
			return fmt.Errorf("pass %s is in the table twice", p.Name)
		}
		pos[p.Name] = i
	}
	for _, c := range constraints {
		a, okA := pos[c.A]
		b, okB := pos[c.B]
		switch {
		case !okA:
			return fmt.Errorf("constraint %s before %s names unknown pass %s", c.A, c.B, c.A)
		case !okB:
			return fmt.Errorf("constraint %s before %s names unknown pass %s", c.A, c.B, c.B)
		case c.Reason == "":
			return fmt.Errorf("constraint %s before %s has no reason", c.A, c.B)
		case a >= b:
			return fmt.Errorf("pass %s must run before %s: %s", c.A, c.B, c.Reason)
		}
	}
	return nil
}
