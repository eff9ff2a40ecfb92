// Package plan holds the compiled artifact: a per-phase list of dispatches over planned
// buffers, grouped into concurrent groups separated by barriers, plus the minimal
// dependency DAG. passes produce plans; backends (cpu, cuda, metal) execute them. The
// package imports only graph, so backends and the compiler meet here and nowhere else.
package plan

import "pistil/graph"

// Plan is one phase (decode, or a prefill chunk of fixed size) of one model.
type Plan struct {
	Model string `json:"model"`
	Phase string `json:"phase"` // "decode" or "prefill"
	// Tokens is the phase's T: 1 for decode, the chunk size for prefill. Shapes in the plan
	// have T substituted; C (context before the step) stays symbolic and is read by
	// StepScalars dispatches from the step-scalar buffer at run time; N is the session's
	// context capacity, bound when a session allocates its state.
	Tokens int `json:"tokens"`
	// Context is the context length C the plan's costs assume (attention's KV reads); the
	// plan itself runs at any C.
	Context    int        `json:"context,omitempty"`
	Buffers    []Buffer   `json:"buffers"`
	Dispatches []Dispatch `json:"dispatches"`
	// Groups partition Dispatches, in order: the members of a group may run concurrently,
	// and a barrier separates each group from the next.
	Groups []Group `json:"groups"`
	// Edges is the transitive reduction of the dependency relation between dispatches
	// (From must finish before To starts): what a CUDA graph needs.
	Edges  []Edge `json:"edges"`
	Totals Totals `json:"totals"`
	// Passes records which passes ran, so a plan says how it was made.
	Passes []string `json:"passes"`
	// Backend is the target the plan was compiled for (empty: the CPU).
	Backend string `json:"backend,omitempty"`
}

// BufferKind says who owns a buffer's bytes.
type BufferKind string

const (
	// Weight buffers are bound to checkpoint tensors (read-only).
	Weight BufferKind = "weight"
	// State buffers belong to a session and persist across steps (KV cache, conv and
	// recurrent state).
	State BufferKind = "state"
	// Input buffers are written by the runtime before each step (token ids).
	Input BufferKind = "input"
	// Output buffers are read by the runtime after each step (logits).
	Output BufferKind = "output"
	// Scratch is the arena of intermediate activations; memory planning assigns offsets.
	Scratch BufferKind = "scratch"
)

// Buffer is one allocation. Its size is PerN*N + Bytes, so state sized by the context
// capacity (the KV cache) stays symbolic until a session binds N.
type Buffer struct {
	ID    int        `json:"id"`
	Kind  BufferKind `json:"kind"`
	Name  string     `json:"name"` // weight or state name; "arena" for scratch
	Type  graph.Type `json:"type"` // logical type of the weight/state/input/output
	Bytes int64      `json:"bytes"`
	PerN  int64      `json:"per_n,omitempty"`
}

// Size binds N.
func (b Buffer) Size(n int) int64 { return b.Bytes + b.PerN*int64(n) }

// Operand places one argument or result of a dispatch: a buffer, a byte offset in it and
// the value's type (T substituted).
type Operand struct {
	Buffer int        `json:"buffer"`
	Offset int64      `json:"offset"`
	Type   graph.Type `json:"type"`
}

// Range is [Off, End) of a buffer: the unit of the barrier analysis.
type Range struct {
	Buffer int   `json:"buffer"`
	Off    int64 `json:"off"`
	End    int64 `json:"end"`
}

// Dispatch is one kernel launch: an op of the table (fused or primitive) applied to
// operands.
type Dispatch struct {
	Index  int         `json:"index"`
	Op     string      `json:"op"`
	Kernel string      `json:"kernel,omitempty"` // backend kernel choice, when a pass picked one
	Value  graph.ID    `json:"value"`            // the graph value it computes (for dumps)
	Label  string      `json:"label,omitempty"`  // e.g. the weight name it reads
	Attrs  graph.Attrs `json:"attrs,omitempty"`
	Args   []Operand   `json:"args"`
	// Results has one operand per result element (one for a non-tuple result).
	Results []Operand `json:"results"`
	Reads   []Range   `json:"reads"`
	Writes  []Range   `json:"writes"`
	// Grid is the launch grid in groups and Block the threads of a group, when a GPU
	// target's select-kernels pass chose Kernel; otherwise Grid is the logical extent
	// (the result's last dimension, then the product of the others).
	Grid  [3]int `json:"grid"`
	Block int    `json:"block,omitempty"`
	Group int    `json:"group"`
	// Cost of one execution (bytes of weights actually touched, activations, state).
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	Flops        int64 `json:"flops"`
	// WeightBytesRead is the part of BytesRead that comes from weight buffers.
	WeightBytesRead int64 `json:"weight_bytes_read,omitempty"`
}

// Group is a set of consecutive dispatches that may run concurrently. Barrier says why the
// barrier before this group is there (empty for the first group).
type Group struct {
	First   int    `json:"first"` // dispatch indexes, inclusive
	Last    int    `json:"last"`
	Barrier string `json:"barrier,omitempty"`
}

// Edge is a dependency: From must complete before To starts.
type Edge struct {
	From int `json:"from"`
	To   int `json:"to"`
}

// Totals are the per-phase numbers `pistil compile` prints.
type Totals struct {
	Dispatches int `json:"dispatches"`
	Groups     int `json:"groups"`
	Barriers   int `json:"barriers"`
	// LongestChain is the number of dispatches on the longest path of the dependency DAG:
	// the sequential stages a perfect scheduler still needs.
	LongestChain int   `json:"longest_chain"`
	ScratchBytes int64 `json:"scratch_bytes"`
	// StateBytes is session state excluding the KV cache; KVBytesPerToken is the KV cache
	// growth per context token.
	StateBytes      int64 `json:"state_bytes"`
	KVBytesPerToken int64 `json:"kv_bytes_per_token"`
	// WeightBytesRead is the weight bytes one step reads (routed experts counted as top-k
	// per token, at most all experts).
	WeightBytesRead int64 `json:"weight_bytes_read"`
	BytesRead       int64 `json:"bytes_read"`
	BytesWritten    int64 `json:"bytes_written"`
	Flops           int64 `json:"flops"`
}

// Stub rebuilds the graph value a dispatch computes, as far as an op's reference or
// kernel selection needs it: op, attrs, label, the args' types and the result type (a
// tuple when the dispatch has several results). The args carry no data and no ID.
func (d *Dispatch) Stub() *graph.Value {
	v := &graph.Value{ID: d.Value, Op: d.Op, Attrs: d.Attrs, Name: d.Label}
	for _, a := range d.Args {
		v.Args = append(v.Args, &graph.Value{ID: -1, Type: a.Type})
	}
	elems := make([]graph.Type, len(d.Results))
	for i, r := range d.Results {
		elems[i] = r.Type
	}
	if len(elems) == 1 {
		v.Type = elems[0]
	} else {
		v.Type = graph.Tuple(elems...)
	}
	return v
}
