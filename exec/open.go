package exec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// Open loads the checkpoint in dir and prepares it to run on the chosen backend. The
// graph is declared once with the checkpoint's weight types; plans are compiled per token
// count on first use.
func Open(dir string, o Options) (*Model, error) {
	if err := checkRegistered(o.Backend); err != nil {
		return nil, err
	}
	pr, err := prepare(dir, o)
	if err != nil {
		return nil, err
	}
	o = pr.opts
	backend, err := NewBackend(o.Backend, BackendOptions{Workers: o.Workers, Kernels: o.Kernels, Activations: o.Activations, Int8Kernel: o.Int8Kernel, AttentionKernel: o.AttentionKernel, WorkerPool: o.WorkerPool, PrefaultWeights: o.PrefaultWeights, NoDecodeRegions: o.NoDecodeRegions, NoBalancedRegions: o.NoBalancedRegions, NoMultiRowKernels: o.NoMultiRowKernels, Graphs: o.Graphs, ProgrammaticLaunch: o.ProgrammaticLaunch, LateLoads: o.LateLoads, KernelDefines: o.KernelDefines, Metal: o.Metal})
	if err != nil {
		pr.ck.Close()
		return nil, err
	}
	m := &Model{
		name: filepath.Base(filepath.Clean(dir)), cfg: pr.ck.Config(), opts: o, backend: backend, weights: pr.ck,
		chunk: pr.chunk, programs: map[int]Program{}, compile: pr.compile,
		weightBytes: pr.weightBytes, weightsSeen: map[string]bool{},
	}
	// Before the plans load, so that their weights are mapped in settled pages.
	if o.Backend == "cpu" && !o.NoHugePageCache && safetensors.MapHugePages {
		var rereading func(path string, done, total int64)
		if o.Progress != nil {
			rereading = func(_ string, done, total int64) { o.Progress(LoadPageCache, done, total) }
		}
		m.pageCache, m.pageCacheErr = pr.ck.SettleHugePages(rereading)
	}
	for _, v := range pr.graph.Values {
		if v.Op == "state" {
			m.states = append(m.states, StateSpec{Name: v.Name, Type: v.Type})
		}
	}
	// The decode plan and the full prefill chunk are the ones every session uses: compile
	// them now so the first request does not pay for it (and a plan that cannot be
	// compiled or loaded fails Open, not a request). Remainder pieces compile on first use,
	// or now with AllPieces.
	plans := []int{1, pr.chunk}
	if o.AllPieces {
		plans = append([]int{1}, slices.DeleteFunc(m.pieceSizes(), func(n int) bool { return n == 1 })...)
	}
	for i, tokens := range plans {
		if _, err := m.program(tokens); err != nil {
			m.Close()
			return nil, err
		}
		if o.Progress != nil {
			o.Progress(LoadPlans, int64(i+1), int64(len(plans)))
		}
	}
	return m, nil
}

// CompilePlan compiles the plan Open would load for steps of tokens, without a backend:
// what `pistil compile --backend` is checked against on machines without the GPU.
func CompilePlan(dir string, o Options, tokens int) (*plan.Plan, error) {
	pr, err := prepare(dir, o)
	if err != nil {
		return nil, err
	}
	defer pr.ck.Close()
	return pr.compile(tokens)
}

// prepared is a checkpoint opened and its graph declared for the backend, with the
// compiler set up: everything of Open before a backend is involved.
type prepared struct {
	opts    Options
	ck      *checkpoint.Checkpoint
	graph   *graph.Graph
	chunk   int
	compile func(tokens int) (*plan.Plan, error)
	// weightBytes is the size of every bound weight.
	weightBytes int64
}

func prepare(dir string, o Options) (*prepared, error) {
	if o.Backend == "" {
		o.Backend = "cpu"
	}
	switch o.Kernels {
	case "", "fast", "reference":
	default:
		return nil, fmt.Errorf("kernels %q: want \"fast\" or \"reference\"", o.Kernels)
	}
	chunk := o.Chunk
	if chunk == 0 {
		chunk = DefaultChunkFor(o.Backend)
	}
	if chunk <= 0 {
		return nil, fmt.Errorf("prefill chunk %d must be positive", chunk)
	}
	// [cpu] map_huge_pages: the checkpoint's memory maps 2 MiB-aligned, so that the page
	// cache's large folios map whole (safetensors.MapHugePages); PISTIL_MAP_HUGE=0 overrides.
	safetensors.MapHugePages = !o.NoHugePageMaps && os.Getenv("PISTIL_MAP_HUGE") != "0"
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	cfg := ck.Config()
	g, err := DeclareGraph(cfg, ck.WeightType, o.Backend, o.KVCache, o.AllLogits)
	if err != nil {
		ck.Close()
		return nil, err
	}
	// Bind every weight up front so a checkpoint that lacks a tensor, or has one the model
	// does not use, fails here with the full list rather than at the first step.
	bound, err := ck.Bind(qwen35moe.WeightNames(cfg))
	if err != nil {
		ck.Close()
		return nil, err
	}
	var weightBytes int64
	for _, t := range bound {
		weightBytes += tensorBytes(t)
	}
	compile := func(tokens int) (*plan.Plan, error) {
		return passes.Compile(g, ops.Default, PhaseFor(o.Backend, tokens, o.AllLogits, o.CostContext), o.Passes)
	}
	return &prepared{opts: o, ck: ck, graph: g, chunk: chunk, compile: compile, weightBytes: weightBytes}, nil
}

// DeclareGraph declares the model graph for a backend: weights of the checkpoint's types,
// state of the types the backend's compile target holds (passes.TargetFor), the KV caches
// of type kv unless it is graph.InvalidDType. `pistil compile` declares its graph here
// too, so the plan it prints is the plan Open loads.
func DeclareGraph(cfg *qwen35moe.Config, weightType func(string, graph.Shape) (graph.Type, error), backend string, kv graph.DType, allLogits bool) (*graph.Graph, error) {
	t, err := passes.TargetFor(backend)
	if err != nil {
		return nil, err
	}
	if kv == graph.InvalidDType {
		kv = t.KVDType
	}
	if kv != graph.F32 && kv != graph.BF16 {
		return nil, fmt.Errorf("KV cache type %s: want f32 or bf16", kv)
	}
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{
		WeightType: weightType, KVDType: kv, ConvStateDType: t.ConvStateDType, AllLogits: allLogits,
	})
	if err != nil {
		return nil, fmt.Errorf("declare the model graph: %w", err)
	}
	return g, nil
}

// PhaseFor is the phase Open compiles for a step of tokens (1: decode, else a prefill
// piece) on a backend. costContext is the context the plan's reported costs assume (0:
// passes.DefaultCostContext); it does not change what runs.
func PhaseFor(backend string, tokens int, allLogits bool, costContext int) passes.Phase {
	if costContext == 0 {
		costContext = passes.DefaultCostContext
	}
	phase := passes.Phase{Name: "prefill", Tokens: tokens, Context: costContext, LastLogitsOnly: !allLogits, Backend: backend}
	if tokens == 1 {
		phase.Name, phase.LastLogitsOnly = "decode", false
	}
	return phase
}
