package exec

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"pistil/graph"
	"pistil/ops"
	"pistil/plan"
)

// Backend runs compiled plans on one kind of device. Backends register themselves
// (RegisterBackend, from their package's init) so that exec never imports one; the CLI
// imports every backend it ships.
type Backend interface {
	// Name is the registry key ("cpu", "cuda", "metal").
	Name() string
	// Load prepares a plan to run with its weight buffers bound through weights (by
	// canonical name). It is called once per plan; the Program is replayed every step.
	Load(p *plan.Plan, weights func(name string) (*ops.Tensor, error)) (Program, error)
	// NewState allocates a session's state buffers, zeroed, with the context capacity N
	// bound.
	NewState(specs []StateSpec, capacity int) (State, error)
	// Close frees what the backend holds for its model (a GPU backend's uploaded weights).
	// The model closes its programs and states first; nothing may run afterwards.
	Close() error
}

// Program is one loaded plan.
type Program interface {
	// Tokens is the plan's T.
	Tokens() int
	// Run executes one step: tokens (len == Tokens()) at positions pos..pos+T-1, reading and
	// updating st in place. It returns the logits rows the plan produces (T rows, or the
	// last only), row-major, valid until the next Run.
	Run(ctx context.Context, st State, tokens []int32, pos int) ([]float32, error)
	// Close frees the program's host and device memory; Run fails afterwards.
	Close() error
}

// StateSpec names one state buffer and its type (N symbolic in KV caches).
type StateSpec struct {
	Name string
	Type graph.Type
}

// State is a session's device-resident state: KV caches, conv and recurrent states.
// Reusing a prefix of a conversation copies state into blocks the backend holds (in
// device memory on a GPU) and back, never through the host: the recurrent and conv state
// whole (SaveFixed), the KV caches by ranges of context rows (SaveRows), so that
// snapshots of one conversation share the rows they have in common.
type State interface {
	// Bytes is the allocation size.
	Bytes() int64
	// SaveFixed copies every buffer without context rows (conv and recurrent states).
	SaveFixed() (StateBlock, error)
	// SaveRows copies context rows [from, to) of every buffer whose first dimension is
	// the context N (the KV caches).
	SaveRows(from, to int) (StateBlock, error)
	// Load writes a block saved by a state of the same model back where it was saved
	// from (the same rows, or the fixed buffers); it refuses a block of other buffers.
	Load(b StateBlock) error
	// Zero clears every buffer (a fresh session).
	Zero()
	// Close frees the buffers; every other method fails (or does nothing) afterwards.
	Close() error
}

// StateBlock is a copy of part of a session's state, held by the backend.
type StateBlock interface {
	Bytes() int64
	// Release frees the copy; it cannot be loaded afterwards.
	Release()
}

// SpillableBlock is a StateBlock in device memory apart from the host's (a discrete
// GPU's) that can move to host memory, where it still loads, at the cost of an upload. On
// the CPU and on Apple silicon (unified memory) state is host memory already and blocks
// do not implement it.
type SpillableBlock interface {
	StateBlock
	// Spill copies the block to host memory and frees its device memory. A spilled block
	// stays spilled; spilling it again does nothing.
	Spill() error
	// Spilled says whether the block is in host memory.
	Spilled() bool
}

// onDevice says whether a block holds device memory that it could spill.
func onDevice(b StateBlock) bool {
	sb, ok := b.(SpillableBlock)
	return ok && !sb.Spilled()
}

// spill moves a block to host memory when it is in device memory.
func spill(b StateBlock) error {
	if sb, ok := b.(SpillableBlock); ok && !sb.Spilled() {
		return sb.Spill()
	}
	return nil
}

// BackendOptions configure a backend instance for one model.
type BackendOptions struct {
	// Workers bounds host threads (the CPU backend's goroutines); 0 means every core.
	Workers int
	// Kernels picks the CPU backend's kernels: "fast" (or empty) or "reference".
	Kernels string
	// Activations: the CPU backend's prefill matmul activations (exec.Options).
	Activations string
	// Int8Kernel: the CPU backend's int8 kernel by name (exec.Options).
	Int8Kernel string
	// AttentionKernel: the CPU backend's tiled-attention kernel set by name (exec.Options).
	AttentionKernel string
	// WorkerPool: the CPU backend's worker pool on (exec.Options).
	WorkerPool bool
	// PrefaultWeights: the CPU backend's weights mapped in when a plan loads (exec.Options).
	PrefaultWeights bool
	// NoDecodeRegions: the CPU backend's longer decode regions off (exec.Options).
	NoDecodeRegions bool
	// NoBalancedRegions: the CPU backend's decode regions in fixed shares (exec.Options).
	NoBalancedRegions bool
	// NoMultiRowKernels: the CPU backend's float32 q4 kernels one weight row per call
	// (exec.Options).
	NoMultiRowKernels bool
	// Graphs asks a GPU backend to replay each plan as one recorded graph (CUDA graphs)
	// instead of launching its kernels one by one.
	Graphs bool
	// ProgrammaticLaunch: graph edges as programmatic dependencies (exec.Options).
	ProgrammaticLaunch bool
	// LateLoads: CUDA kernels wait for the kernels before them at entry, none reading
	// its weights or state early (exec.Options).
	LateLoads bool
	// KernelDefines: CUDA kernel tuning macros, NAME=VALUE (exec.Options).
	KernelDefines []string
	// Metal is the Metal encoder's ablation switches (pipeline.toml [metal]); the zero
	// value means the backend's fast defaults.
	Metal MetalOptions
}

// MetalOptions mirror pipeline.toml's [metal] table: the encoder "concurrent" or
// "serial", barriers from the "plan" or after "every" dispatch, command buffers in flight
// (1 or 2), and the GPU token handoff. Each keeps the answer the same.
type MetalOptions struct {
	Encoder      string
	Barriers     string
	InFlight     int
	TokenHandoff bool
}

// BackendFactory makes a backend instance.
type BackendFactory func(BackendOptions) (Backend, error)

var (
	backendsMu sync.Mutex
	backends   = map[string]BackendFactory{}
)

// RegisterBackend makes a backend available to Open by name. Backends call it from
// their package's init.
func RegisterBackend(name string, f BackendFactory) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	backends[name] = f
}

// NewBackend makes an instance of a registered backend, or says which ones exist.
func NewBackend(name string, o BackendOptions) (Backend, error) {
	if err := checkRegistered(name); err != nil {
		return nil, err
	}
	backendsMu.Lock()
	f := backends[name]
	backendsMu.Unlock()
	return f(o)
}

// checkRegistered says which backends exist when name is not one of them ("" is cpu).
func checkRegistered(name string) error {
	if name == "" {
		name = "cpu"
	}
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, ok := backends[name]; ok {
		return nil
	}
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Errorf("backend %q is not available (have %v)", name, names)
}

func bindN(n int) graph.Bindings { return graph.Bindings{N: n} }

// CheckBlock validates a state block before anything of it is written: a block of context
// rows (rows true) holds rows [from, to) within capacity of every buffer with context rows
// (rowBytes > 0), a fixed block every other buffer whole, and neither holds a buffer of the
// other kind or one this session lacks. sizes and rowBytes describe the session's buffers,
// blockSizes the block's, all by state name.
func CheckBlock(rows bool, from, to, capacity int, sizes, rowBytes, blockSizes map[string]int64) error {
	if rows && to > capacity {
		return fmt.Errorf("rows [%d, %d) outside the context capacity %d", from, to, capacity)
	}
	for name, size := range sizes {
		if (rowBytes[name] > 0) != rows {
			continue
		}
		want := size
		if rows {
			want = int64(to-from) * rowBytes[name]
		}
		if n, ok := blockSizes[name]; !ok || n != want {
			return fmt.Errorf("state block does not match state %s (%d bytes, want %d)", name, n, want)
		}
	}
	for name := range blockSizes {
		if _, ok := sizes[name]; !ok || (rowBytes[name] > 0) != rows {
			return fmt.Errorf("state block has buffer %s that this state lacks", name)
		}
	}
	return nil
}

// BlockSizes is the byte size of each buffer of a block held as host copies.
func BlockSizes(data map[string][]byte) map[string]int64 {
	sizes := make(map[string]int64, len(data))
	for name, d := range data {
		sizes[name] = int64(len(d))
	}
	return sizes
}
