package metal

import (
	"encoding/binary"
	"fmt"

	"pistil/exec"
	"pistil/gpu"
	"pistil/ops/kernels"
	"pistil/pipeline"
	"pistil/plan"
)

// API is the part of Metal the encoder uses. The darwin implementation (api_darwin.go)
// sends each method as the Objective-C message named beside it; tests drive the encoder
// with a recording fake.
type API interface {
	// Pipeline is the compute pipeline of a kernel of the compiled library.
	Pipeline(kernel string) (Pipeline, error)
	// NewCommandBuffer: [queue commandBufferWithUnretainedReferences], retained.
	NewCommandBuffer() (CommandBuffer, error)
	// ResidencySet says the weights and every buffer are in a residency set added to the
	// queue (macOS 15+), so encoders need no useResources:.
	ResidencySet() bool
}

// CommandBuffer is one step's MTLCommandBuffer.
type CommandBuffer interface {
	// ComputeEncoder: computeCommandEncoderWithDispatchType: (Concurrent = 1, Serial = 0).
	ComputeEncoder(concurrent bool) ComputeEncoder
	// WaitForPrevious / SignalCompletion: encodeWaitForEvent:value: and
	// encodeSignalEvent:value: on the device's MTLSharedEvent, whose value counts command
	// buffers: each waits for the one made before it, so steps stay in order with hazard
	// tracking off.
	WaitForPrevious()
	SignalCompletion()
	// Commit: commit.
	Commit()
	// Wait: waitUntilCompleted, then status and error (the GPU's message on failure).
	Wait() error
}

// ComputeEncoder is an MTLComputeCommandEncoder.
type ComputeEncoder interface {
	// UseResources: useResources:count:usage: (read | write).
	UseResources(bufs []Buffer)
	// SetPipeline: setComputePipelineState:.
	SetPipeline(p Pipeline)
	// SetBytes: setBytes:length:atIndex: (the args struct, at most 4 KiB, index 0).
	SetBytes(b []byte, index int)
	// Dispatch: dispatchThreadgroups:threadsPerThreadgroup:.
	Dispatch(groups [3]int, threads int)
	// Barrier: memoryBarrierWithScope: MTLBarrierScopeBuffers.
	Barrier()
	// End: endEncoding.
	End()
}

// Buffer is an MTLBuffer: its GPU address (gpuAddress), its bytes (contents; shared
// storage), its length.
type Buffer interface {
	GPUAddress() uint64
	Contents() []byte
	Length() int64
}

// Pipeline is an MTLComputePipelineState.
type Pipeline interface{ Kernel() string }

// Operand is a dispatch's arg or result resolved to GPU memory: the address of its first
// byte and, for a weight, the Weight the kernels take (a dense operand has Data = Addr).
type Operand struct {
	Addr    uint64
	W       kernels.Weight
	Operand plan.Operand
}

// Launch is one kernel dispatch: kernel, threadgroups, threads per group, args bytes.
type Launch struct {
	Kernel  string
	Grid    [3]int
	Threads int
	Args    []byte
}

// Lowering turns a dispatch, its operands resolved, into launches in stages (the launches
// of a stage may run concurrently; a stage waits for the one before): the kernel choice,
// grid and args per dispatch. The shared GPU lowering implements it for Metal's tuning
// (kernels.Metal); steps is the step buffer's address (kernels.StepArgs).
type Lowering interface {
	Lower(d *plan.Dispatch, args, results []Operand, steps uint64) ([][]Launch, error)
}

// Config is the encoder's ablation switches (pipeline.toml [metal]); each keeps the answer.
type Config struct {
	// Concurrent encodes each step with one concurrent compute encoder and barriers;
	// false uses a serial encoder (Metal orders every dispatch after the one before).
	Concurrent bool
	// PlanBarriers puts a barrier exactly at the plan's group boundaries; false puts one
	// after every dispatch (concurrent encoder only).
	PlanBarriers bool
	// InFlight is how many command buffers may be queued at once: 1, or 2 (step N+1 is
	// committed before the CPU waits on step N).
	InFlight int
	// TokenHandoff (greedy decode) appends an argmax that writes the next step's input
	// token on the GPU, so logits never travel to the CPU between steps.
	TokenHandoff bool
}

// DefaultConfig is the fast configuration.
var DefaultConfig = Config{Concurrent: true, PlanBarriers: true, InFlight: 2, TokenHandoff: true}

// Resources are the buffers a plan runs on: for each plan buffer ID a Buffer (scratch,
// output, state) or a weight Operand; Steps has InFlight step buffers of at least
// 16 + 4·Tokens bytes (kernels.StepArgs, then the token ids: the plan's tokens input).
type Resources struct {
	Buffers []Buffer
	Weights map[int]Operand
	Steps   []Buffer
	// Resident are the buffers each encoder declares with useResources: when there is no
	// residency set (the weights' views, scratch, outputs, state, step buffers).
	Resident []Buffer
}

// Encoder encodes one plan's steps. Not safe for concurrent use: the backend's locked
// Metal thread owns it.
type Encoder struct {
	api    API
	cfg    Config
	p      *plan.Plan
	res    Resources
	slots  [][]encoded // per step slot, per dispatch: its stages
	argmax []Launch    // per slot: the token handoff's argmax (TokenHandoff)

	pipelines map[string]Pipeline
	pending   []inFlight // per slot: its last command buffer, until waited on
	steps     uint64     // steps submitted; the shared event counts them
}

type inFlight struct {
	cb   CommandBuffer
	step uint64
}

type encoded struct {
	stages [][]Launch
}

// NewEncoder lowers every dispatch of p once per step slot (the slots differ only in
// their step buffer) and fetches the pipelines it needs.
func NewEncoder(api API, cfg Config, p *plan.Plan, res Resources, low Lowering) (*Encoder, error) {
	if cfg.InFlight != 1 && cfg.InFlight != 2 {
		return nil, fmt.Errorf("metal: %d command buffers in flight (want 1 or 2)", cfg.InFlight)
	}
	if len(res.Steps) < cfg.InFlight {
		return nil, fmt.Errorf("metal: %d step buffers for %d command buffers in flight", len(res.Steps), cfg.InFlight)
	}
	if len(res.Buffers) < len(p.Buffers) {
		return nil, fmt.Errorf("metal: %d buffers bound for a plan of %d", len(res.Buffers), len(p.Buffers))
	}
	e := &Encoder{api: api, cfg: cfg, p: p, res: res, pipelines: map[string]Pipeline{}, pending: make([]inFlight, cfg.InFlight)}
	tokens, logits := -1, -1
	for _, b := range p.Buffers {
		switch {
		case b.Kind == plan.Input && b.Name == "tokens":
			tokens = b.ID
		case b.Kind == plan.Output && b.Name == "logits":
			logits = b.ID
		}
	}
	if tokens < 0 {
		return nil, fmt.Errorf("metal: plan %s has no tokens input", p.Phase)
	}
	for slot := 0; slot < cfg.InFlight; slot++ {
		step := res.Steps[slot]
		if need := int64(16 + 4*p.Tokens); step.Length() < need {
			return nil, fmt.Errorf("metal: step buffer %d has %d bytes, the plan needs %d", slot, step.Length(), need)
		}
		resolve := func(o plan.Operand) (Operand, error) {
			if o.Buffer < 0 || o.Buffer >= len(p.Buffers) {
				return Operand{}, fmt.Errorf("operand of buffer %d, the plan has %d", o.Buffer, len(p.Buffers))
			}
			if w, ok := res.Weights[o.Buffer]; ok {
				w.Operand = o
				return w, nil
			}
			var addr uint64
			if o.Buffer == tokens {
				addr = step.GPUAddress() + 16 + uint64(o.Offset)
			} else if b := res.Buffers[o.Buffer]; b != nil {
				addr = b.GPUAddress() + uint64(o.Offset)
			} else {
				return Operand{}, fmt.Errorf("plan buffer %d (%s) is not bound", o.Buffer, p.Buffers[o.Buffer].Name)
			}
			code, err := gpu.DTypeCode(o.Type.DType)
			if err != nil {
				return Operand{}, err
			}
			return Operand{Addr: addr, W: kernels.Weight{Data: addr, DType: code}, Operand: o}, nil
		}
		var out []encoded
		for i := range p.Dispatches {
			d := &p.Dispatches[i]
			args, err := resolveAll(d.Args, resolve)
			if err != nil {
				return nil, fmt.Errorf("metal: plan %s dispatch %d (%s) args: %w", p.Phase, d.Index, d.Op, err)
			}
			results, err := resolveAll(d.Results, resolve)
			if err != nil {
				return nil, fmt.Errorf("metal: plan %s dispatch %d (%s) results: %w", p.Phase, d.Index, d.Op, err)
			}
			stages, err := low.Lower(d, args, results, step.GPUAddress())
			if err != nil {
				return nil, fmt.Errorf("metal: plan %s dispatch %d (%s): %w", p.Phase, d.Index, d.Op, err)
			}
			if len(stages) == 0 {
				return nil, fmt.Errorf("metal: plan %s dispatch %d (%s) lowered to no launch", p.Phase, d.Index, d.Op)
			}
			out = append(out, encoded{stages})
		}
		e.slots = append(e.slots, out)
		if cfg.TokenHandoff {
			if p.Tokens != 1 || logits < 0 || res.Buffers[logits] == nil {
				return nil, fmt.Errorf("metal: GPU token handoff needs a decode plan (1 token) with a logits output; plan %s has %d tokens", p.Phase, p.Tokens)
			}
			lb := p.Buffers[logits]
			vocab := int(lb.Bytes / 4)
			// The next step's input token: the other slot's step buffer (this slot's when
			// one command buffer is in flight).
			next := res.Steps[(slot+1)%cfg.InFlight]
			args := argBytes(kernels.ArgmaxArgs{X: res.Buffers[logits].GPUAddress(), Out: next.GPUAddress() + 16, T: 1, V: int32(vocab)})
			e.argmax = append(e.argmax, Launch{Kernel: kernels.KernelArgmax, Grid: [3]int{1, 1, 1}, Threads: 256, Args: args})
		}
	}
	for _, slot := range e.slots {
		for _, enc := range slot {
			for _, st := range enc.stages {
				for _, l := range st {
					if err := e.pipeline(l.Kernel); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	for _, l := range e.argmax {
		if err := e.pipeline(l.Kernel); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Encoder) pipeline(kernel string) error {
	if _, ok := e.pipelines[kernel]; ok {
		return nil
	}
	p, err := e.api.Pipeline(kernel)
	if err != nil {
		return fmt.Errorf("metal: pipeline %s: %w", kernel, err)
	}
	e.pipelines[kernel] = p
	return nil
}

func resolveAll(ops []plan.Operand, resolve func(plan.Operand) (Operand, error)) ([]Operand, error) {
	out := make([]Operand, len(ops))
	for i, o := range ops {
		r, err := resolve(o)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		out[i] = r
	}
	return out, nil
}

// Step is what changes between steps: the context before the step, the session's
// capacity, and the input tokens (nil: the token the previous step's argmax wrote, with
// TokenHandoff).
type Step struct {
	Pos, Capacity int
	Tokens        []int32
}

// Ticket names a submitted step.
type Ticket struct {
	step uint64
	slot int
}

// Submit encodes and commits one step. With two command buffers in flight it returns as
// soon as the step is committed; it first waits for the command buffer that last used the
// same step slot, whose step buffer it is about to rewrite.
func (e *Encoder) Submit(s Step) (Ticket, error) {
	slot := int(e.steps % uint64(e.cfg.InFlight))
	if f := e.pending[slot]; f.cb != nil {
		e.pending[slot] = inFlight{}
		if err := f.cb.Wait(); err != nil {
			return Ticket{}, err
		}
	}
	buf := e.res.Steps[slot].Contents()
	le := binary.LittleEndian
	le.PutUint32(buf[0:], uint32(s.Pos))
	le.PutUint32(buf[4:], uint32(e.p.Tokens))
	le.PutUint32(buf[8:], uint32(s.Capacity))
	le.PutUint32(buf[12:], 0)
	switch {
	case s.Tokens == nil && (!e.cfg.TokenHandoff || e.steps == 0):
		return Ticket{}, fmt.Errorf("metal: a step without tokens needs the GPU token handoff of a previous step")
	case s.Tokens != nil && len(s.Tokens) != e.p.Tokens:
		return Ticket{}, fmt.Errorf("metal: plan %s takes %d tokens, got %d", e.p.Phase, e.p.Tokens, len(s.Tokens))
	case s.Tokens != nil:
		for i, t := range s.Tokens {
			le.PutUint32(buf[16+4*i:], uint32(t))
		}
	}
	cb, err := e.api.NewCommandBuffer()
	if err != nil {
		return Ticket{}, err
	}
	// Hazard tracking is off: each step waits for the command buffer before it.
	cb.WaitForPrevious()
	e.encode(cb.ComputeEncoder(e.cfg.Concurrent), slot)
	e.steps++
	cb.SignalCompletion()
	cb.Commit()
	e.pending[slot] = inFlight{cb, e.steps}
	return Ticket{step: e.steps, slot: slot}, nil
}

// encode records one step: the plan's dispatches in order, a barrier before each group
// but the first (or after every launch), and one between the stages of a dispatch.
func (e *Encoder) encode(enc ComputeEncoder, slot int) {
	if !e.api.ResidencySet() && len(e.res.Resident) > 0 {
		enc.UseResources(e.res.Resident)
	}
	barrier := func() {
		if e.cfg.Concurrent {
			enc.Barrier()
		}
	}
	first := true
	dispatch := func(l Launch) {
		enc.SetPipeline(e.pipelines[l.Kernel])
		enc.SetBytes(l.Args, 0)
		enc.Dispatch(l.Grid, l.Threads)
	}
	for gi, g := range e.p.Groups {
		if gi > 0 && e.cfg.PlanBarriers {
			barrier()
		}
		for i := g.First; i <= g.Last; i++ {
			for si, stage := range e.slots[slot][i].stages {
				if si > 0 && e.cfg.PlanBarriers {
					barrier()
				}
				for _, l := range stage {
					if !e.cfg.PlanBarriers && !first {
						barrier()
					}
					first = false
					dispatch(l)
				}
			}
		}
	}
	if e.cfg.TokenHandoff {
		barrier()
		dispatch(e.argmax[slot])
	}
	enc.End()
}

// Wait blocks until the step of t has completed and reports its error.
func (e *Encoder) Wait(t Ticket) error {
	f := e.pending[t.slot]
	if f.cb == nil || f.step != t.step {
		return nil // already waited on (Submit waits before reusing a slot)
	}
	e.pending[t.slot] = inFlight{}
	return f.cb.Wait()
}

// Drain waits for every command buffer still in flight.
func (e *Encoder) Drain() error {
	var first error
	for slot, f := range e.pending {
		if f.cb != nil {
			e.pending[slot] = inFlight{}
			if err := f.cb.Wait(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Token is the token the argmax of step t wrote (TokenHandoff), once t has completed.
func (e *Encoder) Token(t Ticket) int32 {
	next := e.res.Steps[(t.slot+1)%e.cfg.InFlight].Contents()
	return int32(binary.LittleEndian.Uint32(next[16:]))
}

// ConfigOfOptions is the encoder configuration a model is opened with: pipeline.toml's
// [metal] table as exec.Options carries it, or DefaultConfig when the caller set none.
func ConfigOfOptions(o exec.MetalOptions) Config {
	if o == (exec.MetalOptions{}) {
		return DefaultConfig
	}
	return ConfigOf(pipeline.Metal(o))
}

// ConfigOf is the encoder configuration of pipeline.toml's [metal] table (validated by
// package pipeline).
func ConfigOf(m pipeline.Metal) Config {
	return Config{Concurrent: m.Encoder != "serial", PlanBarriers: m.Barriers != "every", InFlight: m.InFlight, TokenHandoff: m.TokenHandoff}
}
