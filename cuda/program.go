//go:build linux

package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// bufferAddr is where a plan buffer lives: a device address, or an uploaded weight.
// State buffers are resolved through the session's state at lowering time.
type bufferAddr struct {
	addr   uint64
	weight *deviceWeight
}

// program is a loaded plan. Its launches hold fixed device addresses, the state's
// included, so they are rebuilt (and the graph re-instantiated) when Run is given
// another session's state than the last one.
type program struct {
	b     *Backend
	p     *plan.Plan
	bufs  []bufferAddr
	owned []uint64 // device allocations to free on release

	steps      uint64 // step buffer: C, T, N, pad, token ids (kernels.StepArgs)
	tokensBuf  int
	logits     int // output buffer ID of "logits"
	logitsHost []byte
	vocab      int

	bound    *state
	launches []*launch // one per dispatch, in plan order
	ops      []string  // the dispatch op of each launch (for profiles)
	graph    uintptr
	exec     uintptr
	stepHost []int32
	events   []uintptr // for profiled runs: one before each launch, one after the last
	closed   bool
	// handoff is the second step slot and the sampler of device-sampled decoding
	// (handoff.go), made on the first StartDecode.
	handoff *handoff
}

func (p *program) Tokens() int { return p.p.Tokens }

// lower resolves every dispatch's operands against st (nil: state addresses are zero,
// for the shape checks at Load) and steps (a step buffer: the scalars, then the tokens
// input) and makes its launch through the shared GPU lowering.
// The launch must be the one the plan names (kernel, grid, group size): the plan is what
// runs, one launch per dispatch and nothing besides.
func (p *program) lower(st *state, steps uint64) (*lowered, error) {
	capacity := 1
	if st != nil {
		capacity = st.capacity
	}
	bind := graph.Bindings{T: p.p.Tokens, N: capacity}
	resolve := func(o plan.Operand) (gpu.Operand, error) {
		buf := &p.p.Buffers[o.Buffer]
		r := gpu.Operand{DType: o.Type.DType, Shape: o.Type.Shape.Eval(bind)}
		switch buf.Kind {
		case plan.Weight:
			w := p.bufs[o.Buffer].weight
			r.W, r.Addr = w.w, w.w.Data
			return r, nil
		case plan.State:
			if st != nil {
				a, ok := st.addrs[buf.Name]
				if !ok {
					return r, fmt.Errorf("session has no state %q", buf.Name)
				}
				r.Addr = a + uint64(o.Offset)
			}
		default:
			r.Addr = p.bufs[o.Buffer].addr + uint64(o.Offset)
			if o.Buffer == p.tokensBuf {
				r.Addr = steps + 16 + uint64(o.Offset)
			}
		}
		code, err := gpu.DTypeCode(o.Type.DType)
		if err != nil {
			return r, err
		}
		r.W = kernels.Weight{Data: r.Addr, DType: code}
		return r, nil
	}
	out := &lowered{}
	for i := range p.p.Dispatches {
		d := &p.p.Dispatches[i]
		in := make([]gpu.Operand, len(d.Args))
		res := make([]gpu.Operand, len(d.Results))
		for j, a := range d.Args {
			o, err := resolve(a)
			if err != nil {
				return nil, fmt.Errorf("plan %s: dispatch %d (%s) arg %d: %w", p.p.Phase, d.Index, d.Op, j, err)
			}
			in[j] = o
		}
		for j, a := range d.Results {
			o, err := resolve(a)
			if err != nil {
				return nil, fmt.Errorf("plan %s: dispatch %d (%s) result %d: %w", p.p.Phase, d.Index, d.Op, j, err)
			}
			res[j] = o
		}
		l, err := gpu.CUDA.Lower(d, in, res, steps)
		if err != nil {
			return nil, fmt.Errorf("plan %s: dispatch %d (%s): %w", p.p.Phase, d.Index, d.Label, err)
		}
		if l.Kernel != d.Kernel || l.Grid != d.Grid || l.Block != d.Block {
			return nil, fmt.Errorf("plan %s: dispatch %d (%s) names kernel %s grid %v block %d, but lowers to %s grid %v block %d here: recompile the plan for cuda",
				p.p.Phase, d.Index, d.Op, d.Kernel, d.Grid, d.Block, l.Kernel, l.Grid, l.Block)
		}
		for _, tc := range tensorCorePasses {
			if d.Attrs.Bool(tc.attr) && p.b.dev.arch < 80 {
				return nil, fmt.Errorf("plan %s: dispatch %d (%s) runs on the tensor-core kernel %s, which needs compute capability 8.0 (this GPU is %d.%d): compile with -pass=%s/off (pipeline.toml [passes] %s = false)",
					p.p.Phase, d.Index, d.Label, l.Kernel, p.b.dev.arch/10, p.b.dev.arch%10, tc.pass, tc.pass)
			}
		}
		if need, short := p.b.dev.groupMemoryShort[l.Kernel]; short {
			pass := groupMemoryPasses[l.Kernel]
			return nil, fmt.Errorf("plan %s: dispatch %d (%s) runs on %s, which needs %d bytes of group memory a group; this GPU (%s) gives at most %d: compile with -pass=%s/off (pipeline.toml [passes] %s = false)",
				p.p.Phase, d.Index, d.Label, l.Kernel, need, p.b.dev.name, p.b.dev.groupMemoryLimit, pass, pass)
		}
		ln, err := p.b.dev.newLaunchFrom(p.b.funcs, l.Kernel, l.Grid, l.Block, l.Args, l.ArgsPointer())
		if err != nil {
			return nil, fmt.Errorf("plan %s: dispatch %d (%s): %w", p.p.Phase, d.Index, d.Label, err)
		}
		out.launches = append(out.launches, ln)
		out.ops = append(out.ops, d.Op)
	}
	return out, nil
}

// tensorCorePasses are the marks that put a dispatch on an mma kernel (sm_80+), each
// with the pass that sets it.
var tensorCorePasses = []struct{ attr, pass string }{
	{gpu.AttrTensorCores, "tensor-cores"},
	{gpu.AttrMMAMatvec, "mma-matvec"},
	{gpu.AttrIMMAMatvec, "imma-matvec"},
	{gpu.AttrStagedMatvec, "staged-matvec"},
	{gpu.AttrMMAAttention, "mma-attention"},
	{gpu.AttrFA2Attention, "fa2-attention"},
}

// groupMemoryPasses are the passes that put a dispatch on a kernel whose group memory
// is more than some GPUs give (kernels.DynamicGroupMemory), by kernel.
var groupMemoryPasses = map[string]string{
	kernels.KernelGatedDeltaChunked:   "chunked-delta",
	kernels.KernelAttentionGQAStaged:  "staged-decode-attention",
	kernels.KernelAttentionPrefillMMA: "mma-attention",
	kernels.KernelAttentionPrefillFA2: "fa2-attention",
}

// lowered is a plan turned into launches, one per dispatch.
type lowered struct {
	launches []*launch
	ops      []string
}

// Run implements exec.Program.
func (p *program) Run(ctx context.Context, st exec.State, tokens []int32, pos int) ([]float32, error) {
	if p.closed {
		return nil, errProgramClosed
	}
	s, ok := st.(*state)
	if !ok {
		return nil, fmt.Errorf("cuda: state of another backend")
	}
	if s.err != nil {
		return nil, fmt.Errorf("cuda: session state is unusable after a device error: %w", s.err)
	}
	if len(tokens) != p.p.Tokens {
		return nil, fmt.Errorf("cuda: plan %s takes %d tokens, got %d", p.p.Phase, p.p.Tokens, len(tokens))
	}
	if pos < 0 || pos+len(tokens) > s.capacity {
		return nil, fmt.Errorf("context full: %d tokens at position %d exceed the session capacity %d", len(tokens), pos, s.capacity)
	}
	for i, id := range tokens {
		if id < 0 || (p.vocab > 0 && int(id) >= p.vocab) {
			return nil, fmt.Errorf("token id %d at position %d is outside the vocabulary [0, %d)", id, pos+i, p.vocab)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cap(p.stepHost) < 4+len(tokens) {
		p.stepHost = make([]int32, 4+len(tokens))
	}
	step := p.stepHost[:4+len(tokens)]
	step[0], step[1], step[2], step[3] = int32(pos), int32(len(tokens)), int32(s.capacity), 0
	copy(step[4:], tokens)
	g := p.b.dev
	err := g.do(func() error {
		if p.bound != s {
			if err := p.bind(s); err != nil {
				return err
			}
		}
		if err := g.d.check("cuMemcpyHtoDAsync (step scalars)", g.d.cuMemcpyHtoDAsync(p.steps, unsafe.Pointer(&step[0]), uint64(4*len(step)), g.stream)); err != nil {
			return err
		}
		if prof := currentProfile(); prof != nil {
			if err := p.runProfiled(prof); err != nil {
				return err
			}
		} else if p.b.graphs {
			if err := g.d.check("cuGraphLaunch", g.d.cuGraphLaunch(p.exec, g.stream)); err != nil {
				return err
			}
		} else {
			for _, l := range p.launches {
				if err := g.run(l); err != nil {
					return err
				}
			}
		}
		out := p.bufs[p.logits].addr
		if err := g.d.check("cuMemcpyDtoHAsync (logits)", g.d.cuMemcpyDtoHAsync(unsafe.Pointer(&p.logitsHost[0]), out, uint64(len(p.logitsHost)), g.stream)); err != nil {
			return err
		}
		if err := g.sync(); err != nil {
			return fmt.Errorf("plan %s step at position %d: %w", p.p.Phase, pos, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return (&ops.Tensor{DType: graph.F32, Data: p.logitsHost}).F32(), nil
}

// bind lowers the plan against s and, with graphs on, builds and instantiates the CUDA
// graph: one kernel node per dispatch, with the plan's dependency edges (the transitive
// reduction), so independent dispatches may run concurrently.
func (p *program) bind(s *state) error {
	low, err := p.lower(s, p.steps)
	if err != nil {
		return err
	}
	p.dropGraph()
	p.launches, p.ops, p.bound = low.launches, low.ops, s
	if !p.b.graphs {
		return nil
	}
	p.graph, p.exec, err = p.buildGraph(p.launches)
	return err
}

// buildGraph records launches (one per dispatch, in plan order) as a CUDA graph with the
// plan's dependency edges and instantiates it.
func (p *program) buildGraph(launches []*launch) (graph, exec uintptr, err error) {
	g := p.b.dev
	if err := g.d.check("cuGraphCreate", g.d.cuGraphCreate(&graph, 0)); err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			g.d.cuGraphDestroy(graph)
			graph = 0
		}
	}()
	pos := make(map[int]int, len(p.p.Dispatches))
	for i, d := range p.p.Dispatches {
		pos[d.Index] = i
	}
	preds := make([][]int, len(p.p.Dispatches))
	for _, e := range p.p.Edges {
		from, ok1 := pos[e.From]
		to, ok2 := pos[e.To]
		if !ok1 || !ok2 || from >= to {
			return 0, 0, fmt.Errorf("plan %s: edge %d -> %d does not join two dispatches in order", p.p.Phase, e.From, e.To)
		}
		preds[to] = append(preds[to], from)
	}
	// One kernel node per dispatch, waiting for the dispatches the plan's edges name:
	// given at the node's creation, or, programmatic, added after as edges with data.
	// Only decode steps: a prefill chunk's kernels are long, its launch gaps are a small
	// share, and the dependents' waiting blocks hold SM slots its concurrent stages could
	// use (H200, 512-token chunk: 1.5% slower with programmatic edges; decode 2-3% faster).
	programmatic := p.b.programmaticEdges() && p.p.Tokens == 1
	nodes := make([]uintptr, len(launches))
	for i, l := range launches {
		deps := make([]uintptr, 0, len(preds[i]))
		for _, f := range preds[i] {
			if !programmatic {
				deps = append(deps, nodes[f])
			}
		}
		var depPtr unsafe.Pointer
		if len(deps) > 0 {
			depPtr = unsafe.Pointer(&deps[0])
		}
		params := kernelNodeParams{fn: l.fn, gridX: l.grid[0], gridY: l.grid[1], gridZ: l.grid[2], blockX: l.block, blockY: 1, blockZ: 1,
			sharedMemBytes: l.shared, kernelParams: l.params}
		if err := g.d.check("cuGraphAddKernelNode "+l.name, g.d.cuGraphAddKernelNode(&nodes[i], graph, depPtr, uintptr(len(deps)), &params)); err != nil {
			return 0, 0, err
		}
	}
	if programmatic {
		if err := p.addProgrammaticEdges(graph, nodes, preds); err != nil {
			return 0, 0, err
		}
	}
	if err := g.d.check("cuGraphInstantiateWithFlags", g.d.cuGraphInstantiateWithFlags(&exec, graph, 0)); err != nil {
		return 0, 0, err
	}
	return graph, exec, nil
}

// graphEdgeData is CUgraphEdgeData: the ports and the type of one graph edge.
type graphEdgeData struct {
	fromPort, toPort, kind uint8
	_                      [5]uint8
}

const (
	graphKernelPortProgrammatic = 1 // CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
	graphDependencyProgrammatic = 1 // CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
)

// addProgrammaticEdges joins the nodes by the plan's edges as programmatic dependencies:
// a node may launch once every block of each node before it has started and passed its
// own wait (griddepcontrol.launch_dependents in the prelude's kernel entry), and its
// blocks wait (griddepcontrol.wait) until those nodes have finished and their writes
// are visible. What a kernel reads was written by a node it reaches through the edges,
// and each of those finished before the node it waits on did, so the transitive
// reduction still orders every read after its write.
func (p *program) addProgrammaticEdges(graph uintptr, nodes []uintptr, preds [][]int) error {
	var from, to []uintptr
	var data []graphEdgeData
	for i, ps := range preds {
		for _, f := range ps {
			from, to = append(from, nodes[f]), append(to, nodes[i])
			data = append(data, graphEdgeData{fromPort: graphKernelPortProgrammatic, kind: graphDependencyProgrammatic})
		}
	}
	if len(from) == 0 {
		return nil
	}
	d := p.b.dev.d
	return d.check("cuGraphAddDependencies_v2 (programmatic)", d.cuGraphAddDependencies(graph,
		unsafe.Pointer(&from[0]), unsafe.Pointer(&to[0]), unsafe.Pointer(&data[0]), uintptr(len(from))))
}

func (p *program) dropGraph() {
	g := p.b.dev
	if p.exec != 0 {
		g.d.cuGraphExecDestroy(p.exec)
		p.exec = 0
	}
	if p.graph != 0 {
		g.d.cuGraphDestroy(p.graph)
		p.graph = 0
	}
}

// release frees the program's own device memory (not the shared weights).
func (p *program) release() {
	p.b.dev.do(func() error {
		p.dropGraph()
		p.handoff.release(p.b.dev)
		for _, a := range p.owned {
			p.b.dev.free(a)
		}
		p.owned = nil
		return nil
	})
}

// Output returns a named float output of the last Run (logits only on this backend).
func (p *program) Output(name string) ([]float32, bool) {
	if name != "logits" {
		return nil, false
	}
	return (&ops.Tensor{DType: graph.F32, Data: p.logitsHost}).F32(), true
}
