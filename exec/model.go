package exec

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sync"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// DefaultChunk and DefaultCUDAChunk are the prefill chunk a zero Options.Chunk means,
// the second on CUDA (pipeline.toml's built-in [phases] and [cuda] prefill_chunk).
const (
	DefaultChunk     = 512
	DefaultCUDAChunk = 1024
)

// DefaultChunkFor is the prefill chunk a zero Options.Chunk means on backend.
func DefaultChunkFor(backend string) int {
	if backend == "cuda" {
		return DefaultCUDAChunk
	}
	return DefaultChunk
}

// Options open a model. The runtime reads no settings file: the caller (the CLI, from
// pipeline.toml through package pipeline) says everything here. The zero value is the
// built-in configuration: CPU, every optional pass on, DefaultChunk, fast kernels.
type Options struct {
	// Backend is a registered backend name ("cpu"); empty means "cpu".
	Backend string
	// Workers bounds the CPU backend's goroutines (0: every core).
	Workers int
	// Chunk is the prefill chunk size (0: DefaultChunkFor(Backend)).
	Chunk int
	// AllLogits compiles plans that return logits for every token (pistil check);
	// otherwise only the last token's logits are computed.
	AllLogits bool
	// Passes is the compiler configuration (which optional passes run, dumps, checks).
	Passes passes.Config
	// Kernels picks the CPU backend's kernels: "fast" (or empty) or "reference".
	Kernels string
	// Activations is the CPU backend's q4 matmul activations: "f32" (or empty), "int16"
	// (decode), "int8" (prefill) or "int8-all" (both) (ops.CheckActivations).
	Activations string
	// Int8Kernel names the CPU backend's int8 kernel (ops.SetInt8Kernel); empty, the fastest.
	Int8Kernel string
	// AttentionKernel names the CPU backend's tiled-attention kernel set
	// (ops.SetAttentionKernel: "avx512bf16", "avx512", "avx512-l1", "avx2", "go", "go-bf16");
	// empty, the fastest.
	AttentionKernel string
	// WorkerPool runs the CPU backend's parallel loops on persistent spinning helpers
	// (ops.SetWorkerPool; pipeline.toml [cpu] worker_pool); false starts goroutines per loop.
	WorkerPool bool
	// PrefaultWeights maps every page of the CPU backend's memory-mapped weights into the
	// process when a plan loads (pipeline.toml [cpu] prefault_weights).
	PrefaultWeights bool
	// NoDecodeRegions switches the CPU backend's longer decode regions off
	// (ops.SetDecodeRegions; pipeline.toml [cpu] decode_regions = false).
	NoDecodeRegions bool
	// NoBalancedRegions splits the CPU backend's decode regions in fixed shares instead
	// of handing them out in grains (ops.SetBalancedRegions; pipeline.toml [cpu]
	// balanced_regions = false).
	NoBalancedRegions bool
	// NoMultiRowKernels has the CPU backend's float32-activation q4 products take one
	// weight row per kernel call (ops.SetMultiRowKernels; pipeline.toml [cpu]
	// multi_row_kernels = false).
	NoMultiRowKernels bool
	// NoHugePageMaps maps the checkpoint's files wherever mmap puts them, in 4 KiB pages
	// (pipeline.toml [cpu] map_huge_pages = false; safetensors.MapHugePages).
	NoHugePageMaps bool
	// NoHugePageCache leaves the page cache as the CPU backend finds it, instead of
	// mapping in the checkpoint files it holds and reading again those it holds in small
	// folios (pipeline.toml [cpu] huge_page_cache = false; safetensors.Set.SettleHugePages).
	NoHugePageCache bool
	// Graphs replays each plan as one recorded GPU graph (CUDA graphs) instead of
	// launching its kernels one by one.
	Graphs bool
	// ProgrammaticLaunch lets each CUDA graph node launch while the nodes it depends on
	// finish (Hopper's programmatic dependent launch); its kernels wait for their inputs.
	ProgrammaticLaunch bool
	// LateLoads turns off CUDA's early loads: the kernels that read their weights (and
	// state nothing in the step writes before them) before waiting for the kernels they
	// depend on wait at entry instead (pipeline.toml [cuda] early_loads = false).
	LateLoads bool
	// KernelDefines sets CUDA kernel tuning macros, each NAME=VALUE
	// (kernels.CheckTuningDefines; pipeline.toml [cuda] kernel_defines).
	KernelDefines []string
	// Metal is the Metal encoder's switches (zero: its defaults).
	Metal MetalOptions
	// TokenHandoff lets Generate sample on the device where the backend's decode program
	// can (DeviceDecoder): a step returns a token id and the next step reads it there, one
	// step running ahead of the host (pipeline.toml [cuda] token_handoff).
	TokenHandoff bool
	// HandoffInOrder, with TokenHandoff, queues each decode step only after the host has
	// read the token before it: no step runs ahead, so none is backed up or discarded
	// (pipeline.toml [cuda] run_ahead = false; an ablation of the run-ahead).
	HandoffInOrder bool
	// AllPieces compiles and loads, at Open, the plan of every prefill piece size (each
	// power of two below the chunk) besides the decode plan and the chunk, so that no
	// request pays for compiling one: a server's first turns after a long cached prefix
	// are a few of these pieces each (pistil serve sets it).
	AllPieces bool
	// CostContext is the context length the plans' reported costs assume (0:
	// passes.DefaultCostContext); `pistil compile` prints the same plans at its default.
	CostContext int
	// KVCache is the KV caches' element type (graph.F32 or graph.BF16; pipeline.toml
	// [state] kv_cache); zero is the backend's compile target's (passes.Target.KVDType).
	KVCache graph.DType
	// Progress, when set, is told how loading goes: LoadPageCache as a checkpoint file is
	// read again into 2 MiB pages, LoadWeights as plans bind the mapped
	// checkpoint's weights (a GPU backend uploads them then), in bytes, and LoadPlans as
	// Open compiles and loads the decode and prefill plans.
	Progress func(stage LoadStage, done, total int64)
}

// LoadStage names a part of loading a model, for Options.Progress.
type LoadStage string

const (
	LoadWeights LoadStage = "weights"
	LoadPlans   LoadStage = "plans"
	// LoadPageCache is a checkpoint file read again into 2 MiB pages (the CPU backend's
	// huge_page_cache), in bytes of that file; only files that need it report.
	LoadPageCache LoadStage = "page-cache"
)

// Weights is what a model reads its weights through: a checkpoint.
type Weights interface {
	Tensor(name string) (*ops.Tensor, error)
	Close() error
}

// Model is a loaded checkpoint with its compiled plans. Plans are compiled per token
// count T on first use and cached: the decode plan (T=1), the prefill chunk, and the
// power-of-two pieces a prompt's remainder splits into, so a prompt of any length runs
// with at most log2(chunk)+1 distinct plans.
type Model struct {
	name    string
	cfg     *qwen35moe.Config
	opts    Options
	backend Backend
	weights Weights
	chunk   int
	states  []StateSpec
	// compile builds the plan for T tokens (the graph is built once; passes run per T).
	compile func(tokens int) (*plan.Plan, error)

	mu       sync.Mutex
	programs map[int]Program
	plans    map[int]*plan.Plan
	closed   bool
	// timer, when set, times the dispatches of every program (TimeDispatches).
	timer *DispatchTimes
	// weightBytes is the size of every bound weight; weightsSeen and weightsDone count
	// those plans have loaded so far, for Options.Progress.
	weightBytes, weightsDone int64
	weightsSeen              map[string]bool
	// pageCache is what Open found of the checkpoint in the page cache and did about it
	// (the CPU backend with huge_page_cache; nil otherwise), and the error that stopped it.
	pageCache    []safetensors.PageCacheReport
	pageCacheErr error
}

// PageCache is what Open found of the checkpoint's files in the page cache and did, file
// by file (safetensors.Set.SettleHugePages; nil where it did not run: a GPU backend,
// huge_page_cache or map_huge_pages off, not Linux), and the error that stopped it
// part-way, if one did. The model runs either way; only its speed differs.
func (m *Model) PageCache() ([]safetensors.PageCacheReport, error) {
	return m.pageCache, m.pageCacheErr
}

// Name is the model's name (its directory's base name).
func (m *Model) Name() string { return m.name }

// Config is the model's text config.
func (m *Model) Config() *qwen35moe.Config { return m.cfg }

// Backend is the backend the model's plans run on (pistil bench asks it for a device
// description).
func (m *Model) Backend() Backend { return m.backend }

// Chunk is the prefill chunk size.
func (m *Model) Chunk() int { return m.chunk }

// Close frees everything the model holds: its programs, the backend's copy of the
// weights and the checkpoint mapping. Sessions belong to their callers, who close them
// first (a GPU session's memory is not the garbage collector's). It is safe to call
// twice; the model's sessions cannot run afterwards (calls return errors).
func (m *Model) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	programs := m.programs
	// The graph (held by compile) and the state specs go too: a closed model that is
	// still referenced keeps nothing large alive.
	m.programs, m.plans, m.compile, m.states = nil, nil, nil, nil
	m.mu.Unlock()
	var errs []error
	for _, p := range programs {
		errs = append(errs, p.Close())
	}
	errs = append(errs, m.backend.Close(), m.weights.Close())
	return errors.Join(errs...)
}

// NewSession allocates state for up to capacity tokens of context.
func (m *Model) NewSession(capacity int) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errModelClosed
	}
	st, err := m.backend.NewState(m.states, capacity)
	if err != nil {
		return nil, fmt.Errorf("new session of %d tokens: %w", capacity, err)
	}
	return &Session{m: m, st: st, capacity: capacity}, nil
}

var errModelClosed = errors.New("the model is closed")

// KVBytesPerToken is the KV cache bytes one context token takes (every attention layer,
// keys and values, in the state's dtype).
func (m *Model) KVBytesPerToken() int64 {
	var n int64
	for _, sp := range m.states {
		if len(sp.Type.Shape) > 0 && sp.Type.Shape[0].Sym == graph.SymN {
			n += sp.Type.Bytes(bindN(1))
		}
	}
	return n
}

// FixedStateBytes is the state that does not grow with the context (conv and recurrent
// states): what a snapshot copies besides the logits.
func (m *Model) FixedStateBytes() int64 { return m.StateBytes(1) - m.KVBytesPerToken() }

// MemoryReporter is a backend that can say how much memory it could still allocate.
type MemoryReporter interface {
	FreeMemory() (int64, error)
}

// FreeMemory is the memory the model's backend could still allocate (device memory on a
// GPU, available host memory on the CPU); false where the backend cannot tell.
func (m *Model) FreeMemory() (int64, bool) {
	r, ok := m.backend.(MemoryReporter)
	if !ok {
		return 0, false
	}
	n, err := r.FreeMemory()
	return n, err == nil && n > 0
}

// StateBytes is the state a session of capacity tokens allocates.
func (m *Model) StateBytes(capacity int) int64 {
	var n int64
	for _, sp := range m.states {
		n += sp.Type.Bytes(bindN(capacity))
	}
	return n
}

// pieceSizes are the step sizes prefills run as (pieceSize's results): the chunk and
// every power of two below it, largest first.
func (m *Model) pieceSizes() []int {
	sizes := []int{m.chunk}
	if m.chunk < 2 {
		return sizes
	}
	for n := m.pieceSize(m.chunk - 1); n >= 1; n /= 2 {
		sizes = append(sizes, n)
	}
	return sizes
}

// pieceSize is the size of the next piece of a prompt with n tokens left: a full chunk,
// else the largest power of two not above n.
func (m *Model) pieceSize(n int) int {
	if n >= m.chunk {
		return m.chunk
	}
	return 1 << (bits.Len(uint(n)) - 1)
}

// Plan is the plan the model runs for steps of tokens (compiled and loaded on first use):
// what `pistil compile --backend` prints for the same options.
func (m *Model) Plan(tokens int) (*plan.Plan, error) {
	if _, err := m.program(tokens); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plans[tokens], nil
}

// LoadedPlans are the step sizes (tokens) whose plans are compiled and loaded, ascending.
func (m *Model) LoadedPlans() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	sizes := slices.Collect(maps.Keys(m.programs))
	slices.Sort(sizes)
	return sizes
}

// Program is the loaded plan for steps of tokens (compiled and loaded on first use), for
// backend tests that check what a backend made of a plan.
func (m *Model) Program(tokens int) (Program, error) { return m.program(tokens) }

// countedTensor is the weights' Tensor, reporting the bytes of each weight the first
// time a plan binds it (called with m.mu held).
func (m *Model) countedTensor(name string) (*ops.Tensor, error) {
	t, err := m.weights.Tensor(name)
	if err == nil && m.opts.Progress != nil && !m.weightsSeen[name] {
		m.weightsSeen[name] = true
		m.weightsDone += tensorBytes(t)
		m.opts.Progress(LoadWeights, m.weightsDone, m.weightBytes)
	}
	return t, err
}

func tensorBytes(t *ops.Tensor) int64 { return int64(len(t.Data) + len(t.Scales) + len(t.Biases)) }

// program returns the loaded plan for T tokens, compiling it on first use.
func (m *Model) program(tokens int) (Program, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errModelClosed
	}
	if p, ok := m.programs[tokens]; ok {
		return p, nil
	}
	pl, err := m.compile(tokens)
	if err != nil {
		return nil, fmt.Errorf("compile the %d-token plan: %w", tokens, err)
	}
	if m.plans == nil {
		m.plans = map[int]*plan.Plan{}
	}
	m.plans[tokens] = pl
	prog, err := m.backend.Load(pl, m.countedTensor)
	if err != nil {
		return nil, fmt.Errorf("load the %d-token plan on %s: %w", tokens, m.backend.Name(), err)
	}
	m.programs[tokens] = prog
	if m.timer != nil {
		m.attachTimer(tokens, prog)
	}
	return prog, nil
}
