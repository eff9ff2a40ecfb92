// Package cpu is the pure-Go backend: it executes a compiled plan dispatch by dispatch
// with the op references of package ops. It is the numerical reference every other
// backend is compared with, and the engine for machines without a supported GPU.
package cpu

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"pistil/exec"
	"pistil/graph"
	"pistil/ops"
	"pistil/plan"
)

func init() {
	exec.RegisterBackend("cpu", func(o exec.BackendOptions) (exec.Backend, error) {
		if err := ops.CheckActivations(o.Activations); err != nil {
			return nil, err
		}
		// pipeline.toml's [cpu] int8_kernel, or the environment's (for testing and
		// measuring a slower machine's int8 path on this one: the AVX2 kernel on an AVX-512
		// VNNI machine, or a kernel's off switch such as avx512vnni-rowcalls); neither
		// set, the fastest kernel runs (none, and the float32 kernels, where the machine has
		// no int8 kernel of its own).
		if err := chooseKernel("cpu.int8_kernel", o.Int8Kernel, Int8KernelEnv, ops.SetInt8Kernel); err != nil {
			return nil, err
		}
		// The tiled attention's kernel set likewise: [cpu] attention_kernel, or the
		// environment's; empty, the fastest.
		if err := chooseKernel("cpu.attention_kernel", o.AttentionKernel, AttentionKernelEnv, ops.SetAttentionKernel); err != nil {
			return nil, err
		}
		// [cpu] worker_pool: persistent helpers for the parallel loops, or goroutines per loop.
		ops.SetWorkerPool(o.WorkerPool)
		// [cpu] decode_regions: a decode step's experts and fused projections in longer
		// parallel regions.
		ops.SetDecodeRegions(!o.NoDecodeRegions)
		// [cpu] balanced_regions: those regions handed out in grains, with stealing.
		ops.SetBalancedRegions(!o.NoBalancedRegions)
		// [cpu] multi_row_kernels: the q4 kernels that take several weight rows a call.
		ops.SetMultiRowKernels(!o.NoMultiRowKernels)
		return &Backend{Workers: o.Workers, Kernels: o.Kernels, Activations: o.Activations, PrefaultWeights: o.PrefaultWeights}, nil
	})
}

// chooseKernel applies a process-wide kernel choice: the environment variable env's name
// over the pipeline setting's value; "" (neither set) makes set pick the fastest, which
// also undoes an earlier model's choice. An error names where the bad name came from.
func chooseKernel(setting, value, env string, set func(string) error) error {
	if v := os.Getenv(env); v != "" {
		setting, value = env, v
	}
	if err := set(value); err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	return nil
}

// Int8KernelEnv names the environment variable that picks the int8 activations' kernel
// by name (ops.SetInt8Kernel).
const Int8KernelEnv = "PISTIL_CPU_INT8_KERNEL"

// AttentionKernelEnv names the environment variable that picks the tiled attention's
// kernel set by name (ops.SetAttentionKernel: "avx512bf16", "avx512", "avx512-l1", "avx2", "go", "go-bf16").
const AttentionKernelEnv = "PISTIL_CPU_ATTENTION_KERNEL"

// Backend is the CPU backend. Workers is the goroutine count the references split heavy
// loops across (0: every core).
type Backend struct {
	Workers int
	Kernels string // ops.Env.Kernels: "fast" (or empty) or "reference"
	// Activations is ops.Env.Activations: "f32" (or empty), "int16", "int8" or "int8-all".
	Activations string
	// PrefaultWeights maps the weights' pages into the process when a plan loads (prefault),
	// if they fit in the available memory.
	PrefaultWeights bool
	prefaulted      map[*byte]bool // weight byte ranges already prefaulted, by first byte
}

// Name implements exec.Backend.
func (b *Backend) Name() string { return "cpu" }

// TimesDispatches implements exec.DispatchTimingBackend: a program's dispatches run one
// after another on the goroutine that calls Run, so each one's wall time is its own.
func (b *Backend) TimesDispatches() bool { return true }

func (b *Backend) workers() int {
	if b.Workers > 0 {
		return b.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// program is a loaded plan: every dispatch resolved to its op reference and a value
// stub carrying the types and attrs the reference reads.
type program struct {
	p           *plan.Plan
	workers     int
	kernels     string
	activations string
	steps       []step
	weights     map[int]*ops.Tensor // buffer ID -> bound weight
	arena       []byte              // scratch, sized for the plan
	outputs     map[string]int      // output buffer name -> buffer ID
	outBufs     map[int][]byte      // output buffer ID -> storage
	tokens      int                 // input buffer ID of "tokens"
	closed      bool
	timer       atomic.Pointer[exec.PlanTimes] // TimeDispatches; nil: untimed
}

type step struct {
	d     *plan.Dispatch
	ref   func(env *ops.Env, v *graph.Value, in, out []*ops.Tensor) error
	value *graph.Value
	// labels carry the pprof label op=<op> that the step's goroutines (and those its
	// reference starts) run under, so that a CPU profile (pistil bench --cpuprofile;
	// go tool pprof -tags) splits the time by op.
	labels context.Context
	// in and out are the dispatch's operands as Run hands them to ref, refilled by every
	// Run; inBuf and outBuf back those that are views of the program's buffers (scratch,
	// outputs), so that resolving a decode step's two thousand operands allocates nothing.
	// A program runs one step at a time (its scratch arena is one), so one set per step is
	// enough.
	in, out       []*ops.Tensor
	inBuf, outBuf []ops.Tensor
}

// Load implements exec.Backend.
func (b *Backend) Load(p *plan.Plan, weights func(string) (*ops.Tensor, error)) (exec.Program, error) {
	prog := &program{p: p, workers: b.workers(), kernels: b.Kernels, activations: b.Activations, weights: map[int]*ops.Tensor{}, outputs: map[string]int{}, outBufs: map[int][]byte{}, tokens: -1}
	for _, buf := range p.Buffers {
		switch buf.Kind {
		case plan.Weight:
			w, err := weights(buf.Name)
			if err != nil {
				return nil, fmt.Errorf("plan %s: weight %s: %w", p.Phase, buf.Name, err)
			}
			if w.DType != buf.Type.DType {
				return nil, fmt.Errorf("plan %s: weight %s is %s in the checkpoint but the plan was compiled for %s", p.Phase, buf.Name, w.DType, buf.Type.DType)
			}
			prog.weights[buf.ID] = w
		case plan.Scratch:
			if buf.PerN != 0 {
				return nil, fmt.Errorf("plan %s: scratch buffer %s depends on the context capacity", p.Phase, buf.Name)
			}
			prog.arena = make([]byte, buf.Bytes)
		case plan.Output:
			prog.outputs[buf.Name] = buf.ID
			prog.outBufs[buf.ID] = make([]byte, buf.Bytes)
		case plan.Input:
			if buf.Name != "tokens" {
				return nil, fmt.Errorf("plan %s: unknown input %q", p.Phase, buf.Name)
			}
			prog.tokens = buf.ID
		}
	}
	if b.PrefaultWeights {
		b.prefaultWeights(prog.weights)
	}
	if prog.tokens < 0 {
		return nil, fmt.Errorf("plan %s has no tokens input", p.Phase)
	}
	if _, ok := prog.outputs["logits"]; !ok {
		return nil, fmt.Errorf("plan %s has no logits output", p.Phase)
	}
	for i := range p.Dispatches {
		d := &p.Dispatches[i]
		info, ok := ops.Default.Info(d.Op)
		if !ok || info.Ref == nil {
			return nil, fmt.Errorf("plan %s: dispatch %d: op %q has no CPU reference", p.Phase, d.Index, d.Op)
		}
		labels := pprof.WithLabels(context.Background(), pprof.Labels("op", d.Op))
		prog.steps = append(prog.steps, step{d: d, ref: info.Ref, value: d.Stub(), labels: labels,
			in: make([]*ops.Tensor, len(d.Args)), out: make([]*ops.Tensor, len(d.Results)),
			inBuf: make([]ops.Tensor, len(d.Args)), outBuf: make([]ops.Tensor, len(d.Results))})
	}
	return prog, nil
}

func (p *program) Tokens() int { return p.p.Tokens }

// TimeDispatches implements exec.DispatchTimer.
func (p *program) TimeDispatches(t *exec.PlanTimes) { p.timer.Store(t) }

// Run implements exec.Program.
func (p *program) Run(ctx context.Context, st exec.State, tokens []int32, pos int) ([]float32, error) {
	if p.closed {
		return nil, errProgramClosed
	}
	s, ok := st.(*state)
	if !ok {
		return nil, fmt.Errorf("cpu: state of another backend")
	}
	if len(tokens) != p.p.Tokens {
		return nil, fmt.Errorf("cpu: plan %s takes %d tokens, got %d", p.p.Phase, p.p.Tokens, len(tokens))
	}
	if pos+len(tokens) > s.capacity {
		return nil, fmt.Errorf("context full: %d tokens at position %d exceed the session capacity %d", len(tokens), pos, s.capacity)
	}
	env := &ops.Env{Bind: graph.Bindings{T: p.p.Tokens, C: pos, N: s.capacity}, Workers: p.workers, Kernels: p.kernels, Activations: p.activations}
	tokenTensor := &ops.Tensor{DType: graph.I32, Shape: []int{len(tokens)}, Data: int32Bytes(tokens)}
	timer := p.timer.Load()
	for i := range p.steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		stp := &p.steps[i]
		for j, a := range stp.d.Args {
			t, err := p.operand(a, env.Bind, s, tokenTensor, &stp.inBuf[j])
			if err != nil {
				return nil, fmt.Errorf("dispatch %d (%s) arg %d: %w", stp.d.Index, stp.d.Op, j, err)
			}
			stp.in[j] = t
		}
		for j, r := range stp.d.Results {
			t, err := p.operand(r, env.Bind, s, tokenTensor, &stp.outBuf[j])
			if err != nil {
				return nil, fmt.Errorf("dispatch %d (%s) result %d: %w", stp.d.Index, stp.d.Op, j, err)
			}
			stp.out[j] = t
		}
		pprof.SetGoroutineLabels(stp.labels)
		env.Labels = stp.labels
		var start time.Time
		if timer != nil {
			start = time.Now()
		}
		err := stp.ref(env, stp.value, stp.in, stp.out)
		if timer != nil {
			timer.Nanos[stp.d.Index].Add(int64(time.Since(start)))
		}
		pprof.SetGoroutineLabels(ctx)
		if err != nil {
			return nil, fmt.Errorf("dispatch %d (%s %s): %w", stp.d.Index, stp.d.Op, stp.d.Label, err)
		}
	}
	if timer != nil {
		timer.Steps.Add(1)
	}
	logits := p.outBufs[p.outputs["logits"]]
	return (&ops.Tensor{DType: graph.F32, Data: logits}).F32(), nil
}

// Output returns a named float output of the last Run (logits, hidden.K).
func (p *program) Output(name string) ([]float32, bool) {
	id, ok := p.outputs[name]
	if !ok {
		return nil, false
	}
	return (&ops.Tensor{DType: graph.F32, Data: p.outBufs[id]}).F32(), true
}

// operand resolves a plan operand to a tensor over the right bytes: the weight's, the
// state's or the tokens' own tensor, or, for a view of the program's scratch or outputs,
// view refilled (its shape slice reused).
func (p *program) operand(o plan.Operand, b graph.Bindings, s *state, tokens, view *ops.Tensor) (*ops.Tensor, error) {
	buf := &p.p.Buffers[o.Buffer]
	switch buf.Kind {
	case plan.Weight:
		return p.weights[o.Buffer], nil
	case plan.Input:
		return tokens, nil
	case plan.State:
		t, ok := s.bufs[buf.Name]
		if !ok {
			return nil, fmt.Errorf("session has no state %q", buf.Name)
		}
		return t, nil
	}
	var data []byte
	switch buf.Kind {
	case plan.Scratch:
		data = p.arena
	case plan.Output:
		data = p.outBufs[o.Buffer]
	default:
		return nil, fmt.Errorf("buffer %d has unknown kind %q", o.Buffer, buf.Kind)
	}
	size := o.Type.Bytes(b)
	if o.Offset < 0 || o.Offset+size > int64(len(data)) {
		return nil, fmt.Errorf("operand [%d,%d) outside buffer %s of %d bytes", o.Offset, o.Offset+size, buf.Name, len(data))
	}
	*view = ops.Tensor{DType: o.Type.DType, Shape: o.Type.Shape.EvalInto(b, view.Shape), Group: o.Type.Group, Data: data[o.Offset : o.Offset+size]}
	return view, nil
}

// prefaultWeights prefaults the codes, scales and biases of every weight not yet done, if
// they all fit in the memory available now (else paging them in would only evict others).
func (b *Backend) prefaultWeights(weights map[int]*ops.Tensor) {
	if b.prefaulted == nil {
		b.prefaulted = map[*byte]bool{}
	}
	var todo [][]byte
	var bytes int64
	for _, w := range weights {
		for _, r := range [][]byte{w.Data, w.Scales, w.Biases} {
			if len(r) > 0 && !b.prefaulted[&r[0]] {
				todo = append(todo, r)
				bytes += int64(len(r))
			}
		}
	}
	if len(todo) == 0 || bytes > memAvailable() {
		return
	}
	for _, r := range todo {
		prefault(r)
		b.prefaulted[&r[0]] = true
	}
}
