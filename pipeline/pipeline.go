// Package pipeline reads pipeline.toml, the engine's settings: which phases to compile,
// the prefill chunk, the pass switches, the CPU backend's workers and the server's table.
// It turns them into passes.Config, passes.Phase and exec.Options values, so the CLI, the
// benchmarks and the server all compile the same way; the runtime itself never reads it.
package pipeline

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
)

// Pipeline is pipeline.toml decoded.
type Pipeline struct {
	Phases Phases `toml:"phases"`
	// Passes switches optional passes on or off by name; the key "check" turns on
	// checking after every pass.
	Passes map[string]bool `toml:"passes"`
	CPU    CPU             `toml:"cpu"`
	CUDA   CUDA            `toml:"cuda"`
	Metal  Metal           `toml:"metal"`
	State  State           `toml:"state"`
	// Attention is the [attention] table.
	Attention Attention `toml:"attention"`
	// Server is kept raw for the server to decode (DecodeServer).
	Server toml.Primitive `toml:"server"`

	meta    toml.MetaData
	hasMeta bool
}

// Phases are the [phases] table.
type Phases struct {
	Compile       []string `toml:"compile"`
	PrefillChunk  int      `toml:"prefill_chunk"`
	CostContext   int      `toml:"cost_context"`
	PrefillLogits string   `toml:"prefill_logits"`
}

// CPU is the [cpu] table.
type CPU struct {
	Workers int    `toml:"workers"`
	Kernels string `toml:"kernels"` // "fast" or "reference" (ops.KernelsFast, ops.KernelsReference)
	// Activations is "f32", "int16", "int8" or "int8-all" (ops.ActivationsF32,
	// ops.ActivationsInt16, ops.ActivationsInt8, ops.ActivationsInt8All): the q4 matmuls'
	// activations under the fast kernels: int16 in decode only, int8 in prefill only or in
	// decode too.
	Activations string `toml:"activations"`
	// Int8Kernel names the int8 activations' kernel (ops.SetInt8Kernel: "avx512vnni",
	// "avx512vnni-plain" (its prefetch, staged stores and long expert work items off),
	// "avx512vnni-rowcalls", "avx512vnni-near" (decode's one-row kernel prefetching 2 KiB
	// ahead, where "avx512vnni" asks 8 KiB on AMD Zen 5), "avxvnni", "avxvnni-rowcalls", "avx2",
	// "avx2-rowcalls", "go",
	// those the machine has), process-wide; empty, the fastest. PISTIL_CPU_INT8_KERNEL
	// overrides it.
	Int8Kernel string `toml:"int8_kernel"`
	// AttentionKernel names the tiled attention's kernel set (ops.SetAttentionKernel:
	// "avx512bf16", "avx512", "avx512-l1", "avx2", "go", "go-bf16", those the machine has),
	// process-wide; empty, the fastest. PISTIL_CPU_ATTENTION_KERNEL overrides it.
	AttentionKernel string `toml:"attention_kernel"`
	// WorkerPool runs the parallel loops on persistent helpers that spin briefly between
	// loops (ops.SetWorkerPool), process-wide (the default); false starts goroutines per
	// loop.
	WorkerPool bool `toml:"worker_pool"`
	// PrefaultWeights maps every page of the memory-mapped weights into the process when a
	// model opens (MADV_POPULATE_READ, Linux), when they fit in the available memory;
	// false leaves them to fault in on first touch.
	PrefaultWeights bool `toml:"prefault_weights"`
	// DecodeRegions runs a decode step's routed experts as one contiguous run of weight
	// rows per worker and a fused projection's weights in one parallel region
	// (ops.SetDecodeRegions), process-wide; false hands the experts' blocks out one at a
	// time and runs each weight as its own region. The same sums either way.
	DecodeRegions bool `toml:"decode_regions"`
	// BalancedRegions hands those regions' rows (and decode's one-row products) out in
	// grains, each worker taking its own share from the front and then the others' from
	// their backs (ops.SetBalancedRegions), process-wide; false splits them in fixed
	// shares. The same bits either way.
	BalancedRegions bool `toml:"balanced_regions"`
	// MultiRowKernels has the float32-activation q4 products take several weight rows per
	// kernel call, each activation vector loaded once for all of them
	// (ops.SetMultiRowKernels): decode's matrix-vector products four rows, prefill's blocks
	// of eight activation rows two; false one weight row a call. The same bits either way.
	MultiRowKernels bool `toml:"multi_row_kernels"`
	// MapHugePages maps the checkpoint's files at 2 MiB-aligned addresses with
	// MADV_HUGEPAGE (Linux), so that the page cache's 2 MiB folios are mapped whole
	// (safetensors.MapHugePages); false lets mmap place them, 4 KiB page-table entries.
	MapHugePages bool `toml:"map_huge_pages"`
	// HugePageCache, with MapHugePages, maps in the checkpoint files the page cache holds
	// when the CPU backend opens them (when they fit in the memory available) and reads
	// again each that the page cache holds mostly in small folios, so that its mapping can
	// map 2 MiB pages (safetensors.Set.SettleHugePages); false leaves the page cache as it
	// is.
	HugePageCache bool `toml:"huge_page_cache"`
}

// CUDA is the [cuda] table.
type CUDA struct {
	// Graphs replays each plan as one CUDA graph built from its dependency edges; false
	// launches the kernels one by one (for comparison and debugging).
	Graphs bool `toml:"graphs"`
	// ProgrammaticLaunch makes the graph's edges programmatic dependencies (sm_90+): a
	// kernel is launched while the kernels it waits for finish, and waits for their
	// results on the device, which hides the launch gap of each dependent stage.
	ProgrammaticLaunch bool `toml:"programmatic_launch"`
	// EarlyLoads lets the kernels written for it (KERNEL_EARLY in ops/kernels) read what
	// no kernel before them in the step writes (weights, their own state) before waiting
	// for those kernels; false compiles them to wait at entry (exec.Options.LateLoads).
	EarlyLoads bool `toml:"early_loads"`
	// TokenHandoff samples decode steps on the GPU, each writing the next step's input
	// token there, one step running ahead of the host (exec.Options.TokenHandoff); false
	// copies every step's logits to the host and samples there.
	TokenHandoff bool `toml:"token_handoff"`
	// RunAhead, with TokenHandoff, queues step k+1 before the host reads token k (the
	// state before it backed up on the device, for a stop found in token k); false
	// queues each step after the token before it is read (exec.Options.HandoffInOrder).
	RunAhead bool `toml:"run_ahead"`
	// PrefillChunk, when above 0, is the prefill chunk on CUDA in place of
	// phases.prefill_chunk: the tile shapes that make a chunk fast differ between backends
	// (PrefillChunk(backend)).
	PrefillChunk int `toml:"prefill_chunk"`
	// KernelDefines sets the CUDA kernels' tuning macros (kernels.TuningMacros), each
	// NAME=VALUE: the off switches of kernel variants that compute the same values
	// (MMA_UNGUARDED=0, MMA_PARTIAL_SUBTILES=0, ...) and launch bounds, compiled into a
	// module of their own (exec.Options.KernelDefines).
	KernelDefines []string `toml:"kernel_defines"`
}

// State is the [state] table: the storage types of the session state a backend holds.
type State struct {
	// KVCache is the KV caches' element type, "f32" or "bf16"; empty is the backend's
	// compile target's choice (passes.Target.KVDType: float32 on every backend today).
	KVCache string `toml:"kv_cache"`
}

// KVDType is the KV cache type the table asks for; graph.InvalidDType (no kv_cache) is
// the backend's own.
func (s State) KVDType() (graph.DType, error) {
	switch s.KVCache {
	case "":
		return graph.InvalidDType, nil
	case "f32":
		return graph.F32, nil
	case "bf16":
		return graph.BF16, nil
	}
	return graph.InvalidDType, fmt.Errorf("state.kv_cache = %q: want \"f32\" or \"bf16\" (or no key: the backend's choice)", s.KVCache)
}

// Attention is the [attention] table: how GPU decode attention spreads a long context.
type Attention struct {
	// KeyBlockSplitFrom is the context (keys a query sees) from which GPU decode cuts
	// the keys into fixed blocks (passes.Config.KeyBlockSplitFrom); 0 never does: a fixed
	// number of ranges at every context, each longer as the context grows.
	KeyBlockSplitFrom int `toml:"key_block_split_from"`
	// KeyBlockKeys is the keys of each block, a positive multiple of
	// kernels.AttnKeyBlock (passes.Config.KeyBlockKeys).
	KeyBlockKeys int `toml:"key_block_keys"`
}

// Metal is the [metal] table: the Metal encoder's ablation switches (metal.Config).
type Metal struct {
	Encoder      string `toml:"encoder"`  // "concurrent" or "serial"
	Barriers     string `toml:"barriers"` // "plan" or "every" (after every dispatch)
	InFlight     int    `toml:"in_flight"`
	TokenHandoff bool   `toml:"token_handoff"`
}

// Default is the built-in configuration; it equals the repository's pipeline.toml (a
// test keeps them in step), so a missing file changes nothing.
func Default() *Pipeline {
	return &Pipeline{
		Phases: Phases{Compile: []string{"decode", "prefill"}, PrefillChunk: 512, CostContext: passes.DefaultCostContext, PrefillLogits: "last"},
		Passes: map[string]bool{
			"fuse-dequant": true, "fuse-gdn-gates": true, "fuse-conv-silu": true, "fuse-slice-l2": true, "fuse-gdn-prologue": false, "fuse-conv-l2": true, "fuse-delta-norm": false,
			"fuse-swiglu": true, "fuse-router": true, "fuse-moe-combine": true, "fuse-shared-gate": true, "fuse-shared-expert": true, "fuse-expert-routing": false,
			"fuse-projections": true, "fuse-add-norm": true, "fuse-norm-out-proj": true, "gated-norm-matvec": false,
			"fuse-qk-norm-rope": true, "fuse-slice-rope": true, "fuse-rope-append": true, "fuse-attn-gate": true, "tensor-cores": true, "mma-split-k": true, "split-k-only-idle": true, "expert-tiles": true, "expert-split-k": false, "busy-expert-tiles": true, "mma-wide-rows": true, "slice-views": true, "batched-matvec": false, "expert-gather": false, "expert-per-slot": true, "tile-attention": true,
			"mma-matvec": true, "imma-matvec": false, "staged-matvec": true, "mma-attention": true, "fa2-attention": true, "mma-decode-attention": true, "staged-decode-attention": false, "chunked-delta": true, "router-matvec": false, "norm-matvec": true, "norm-matvec-q4": false,
			"check": false,
		},
		Attention: Attention{KeyBlockSplitFrom: passes.DefaultKeyBlockSplitFrom, KeyBlockKeys: gpu.BlockSplitKeys},
		CPU:       CPU{Kernels: "fast", Activations: ops.ActivationsF32, WorkerPool: true, DecodeRegions: true, BalancedRegions: true, MultiRowKernels: true, MapHugePages: true, HugePageCache: true},
		CUDA:      CUDA{Graphs: true, ProgrammaticLaunch: true, EarlyLoads: true, TokenHandoff: true, RunAhead: false, PrefillChunk: exec.DefaultCUDAChunk},
		Metal:     Metal{Encoder: "concurrent", Barriers: "plan", InFlight: 2, TokenHandoff: true},
	}
}

// Load reads a pipeline.toml; an empty path means Default.
func Load(path string) (*Pipeline, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse decodes and validates pipeline.toml text over the defaults: a file may hold only
// the tables and keys it changes (a [passes] table with one switch leaves the others as
// Default has them). Keys it does not know are errors naming them (except inside
// [server], which belongs to the server).
func Parse(data []byte) (*Pipeline, error) {
	p := Default()
	md, err := toml.Decode(string(data), p)
	if err != nil {
		return nil, err
	}
	p.meta, p.hasMeta = md, true
	var unknown []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == "server" {
			continue
		}
		unknown = append(unknown, k.String())
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown keys: %s", strings.Join(unknown, ", "))
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pipeline) validate() error {
	for _, ph := range p.Phases.Compile {
		if ph != "decode" && ph != "prefill" {
			return fmt.Errorf("phases.compile: unknown phase %q (want decode or prefill)", ph)
		}
	}
	if p.Phases.PrefillChunk <= 0 {
		return fmt.Errorf("phases.prefill_chunk = %d: must be positive", p.Phases.PrefillChunk)
	}
	if p.CUDA.PrefillChunk < 0 {
		return fmt.Errorf("cuda.prefill_chunk = %d: must not be negative (0: phases.prefill_chunk)", p.CUDA.PrefillChunk)
	}
	if err := kernels.CheckTuningDefines(p.CUDA.KernelDefines); err != nil {
		return fmt.Errorf("cuda.kernel_defines: %w", err)
	}
	if p.Phases.CostContext < 0 {
		return fmt.Errorf("phases.cost_context = %d: must not be negative", p.Phases.CostContext)
	}
	if p.Phases.PrefillLogits != "last" && p.Phases.PrefillLogits != "all" {
		return fmt.Errorf("phases.prefill_logits = %q: want \"last\" or \"all\"", p.Phases.PrefillLogits)
	}
	if p.CPU.Workers < 0 {
		return fmt.Errorf("cpu.workers = %d: must not be negative", p.CPU.Workers)
	}
	switch p.CPU.Kernels {
	case "": // a file without the key gets the default
		p.CPU.Kernels = "fast"
	case "fast", "reference":
	default:
		return fmt.Errorf("cpu.kernels = %q: want \"fast\" or \"reference\"", p.CPU.Kernels)
	}
	if p.CPU.Activations == "" {
		p.CPU.Activations = ops.ActivationsF32
	}
	if err := ops.CheckActivations(p.CPU.Activations); err != nil {
		return fmt.Errorf("cpu.%w", err)
	}
	if k := p.CPU.AttentionKernel; k != "" && !slices.Contains(ops.AttentionKernelNames, k) {
		return fmt.Errorf("cpu.attention_kernel = %q: want \"\" (the fastest) or one of %s", k, strings.Join(ops.AttentionKernelNames, ", "))
	}
	if err := p.Metal.validate(); err != nil {
		return err
	}
	if _, err := p.State.KVDType(); err != nil {
		return err
	}
	if p.Attention.KeyBlockSplitFrom < 0 {
		return fmt.Errorf("attention.key_block_split_from = %d: must not be negative (0: never)", p.Attention.KeyBlockSplitFrom)
	}
	if k := p.Attention.KeyBlockKeys; k <= 0 || k%kernels.AttnKeyBlock != 0 {
		return fmt.Errorf("attention.key_block_keys = %d: want a positive multiple of %d", k, kernels.AttnKeyBlock)
	}
	_, err := p.PassConfig(nil)
	return err
}

func (m *Metal) validate() error {
	if m.Encoder != "concurrent" && m.Encoder != "serial" {
		return fmt.Errorf("metal.encoder = %q: want \"concurrent\" or \"serial\"", m.Encoder)
	}
	if m.Barriers != "plan" && m.Barriers != "every" {
		return fmt.Errorf("metal.barriers = %q: want \"plan\" or \"every\"", m.Barriers)
	}
	if m.InFlight != 1 && m.InFlight != 2 {
		return fmt.Errorf("metal.in_flight = %d: want 1 or 2", m.InFlight)
	}
	return nil
}

// PassConfig is the passes.Config of the [passes] switches with the -pass flag values
// applied on top, in order.
func (p *Pipeline) PassConfig(flags []string) (passes.Config, error) {
	cfg := passes.Config{KeyBlockSplitFrom: p.Attention.KeyBlockSplitFrom, KeyBlockKeys: p.Attention.KeyBlockKeys}
	if cfg.KeyBlockSplitFrom == 0 {
		cfg.KeyBlockSplitFrom = -1 // the file's "never"; the Config's zero is the default
	}
	names := make([]string, 0, len(p.Passes))
	for k := range p.Passes {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		on := p.Passes[name]
		if name == "check" {
			cfg.Check = on
			continue
		}
		action := "on"
		if !on {
			action = "off"
		}
		if err := cfg.ApplyFlag(name + "/" + action); err != nil {
			return passes.Config{}, fmt.Errorf("passes.%s: %w", name, err)
		}
	}
	for _, f := range flags {
		if err := cfg.ApplyFlag(f); err != nil {
			return passes.Config{}, err
		}
	}
	return cfg, nil
}

// PrefillChunk is the prefill chunk on backend: [cuda].prefill_chunk on CUDA when set,
// else [phases].prefill_chunk.
func (p *Pipeline) PrefillChunk(backend string) int {
	if backend == "cuda" && p.CUDA.PrefillChunk > 0 {
		return p.CUDA.PrefillChunk
	}
	return p.Phases.PrefillChunk
}

// Phase describes a phase for the compiler: decode (T = 1) or prefill (T = tokens, the
// [phases] chunk when tokens is 0; callers that know the backend pass PrefillChunk's).
// context sets the cost context (0: [phases].cost_context).
func (p *Pipeline) Phase(name string, tokens, context int) (passes.Phase, error) {
	if context == 0 {
		context = p.Phases.CostContext
	}
	switch name {
	case "decode":
		return passes.Phase{Name: "decode", Tokens: 1, Context: context}, nil
	case "prefill":
		if tokens == 0 {
			tokens = p.Phases.PrefillChunk
		}
		if tokens <= 0 {
			return passes.Phase{}, fmt.Errorf("prefill chunk %d must be positive", tokens)
		}
		return passes.Phase{Name: "prefill", Tokens: tokens, Context: context, LastLogitsOnly: p.Phases.PrefillLogits == "last"}, nil
	}
	return passes.Phase{}, fmt.Errorf("unknown phase %q (want decode or prefill)", name)
}

// ExecOptions are the runtime options this pipeline gives a model opened on backend,
// with the -pass flag values applied on top of [passes]: the runtime reads no file, the
// caller hands it these.
func (p *Pipeline) ExecOptions(backend string, passFlags []string) (exec.Options, error) {
	cfg, err := p.PassConfig(passFlags)
	if err != nil {
		return exec.Options{}, err
	}
	kv, err := p.State.KVDType()
	if err != nil {
		return exec.Options{}, err
	}
	return exec.Options{KVCache: kv, Backend: backend, Workers: p.CPU.Workers, Chunk: p.PrefillChunk(backend),
		Passes: cfg, Kernels: p.CPU.Kernels, Activations: p.CPU.Activations, Int8Kernel: p.CPU.Int8Kernel, AttentionKernel: p.CPU.AttentionKernel, WorkerPool: p.CPU.WorkerPool, PrefaultWeights: p.CPU.PrefaultWeights, NoDecodeRegions: !p.CPU.DecodeRegions, NoBalancedRegions: !p.CPU.BalancedRegions, NoMultiRowKernels: !p.CPU.MultiRowKernels, NoHugePageMaps: !p.CPU.MapHugePages, NoHugePageCache: !p.CPU.HugePageCache, Graphs: p.CUDA.Graphs, ProgrammaticLaunch: p.CUDA.ProgrammaticLaunch, LateLoads: !p.CUDA.EarlyLoads, KernelDefines: p.CUDA.KernelDefines, Metal: exec.MetalOptions(p.Metal), CostContext: p.Phases.CostContext,
		TokenHandoff: backend == "cuda" && p.CUDA.TokenHandoff, HandoffInOrder: !p.CUDA.RunAhead}, nil
}

// DecodeServer decodes the [server] table into v (a struct of the server's settings).
// Without a file (Default) or without the table it leaves v unchanged.
func (p *Pipeline) DecodeServer(v any) error {
	if !p.hasMeta || !p.meta.IsDefined("server") {
		return nil
	}
	if err := p.meta.PrimitiveDecode(p.Server, v); err != nil {
		return fmt.Errorf("pipeline [server]: %w", err)
	}
	return nil
}
