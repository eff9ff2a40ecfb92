package metal

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/pipeline"
	"pistil/plan"
)

// A recording fake of the Metal API: every call the encoder makes, in order, with what
// it was given. It checks what Metal would refuse (a pipeline that does not exist, an
// encoder used after endEncoding, setBytes over 4 KiB, a command buffer committed twice).

type call struct {
	cb   int    // command buffer index (-1: none)
	name string // the Objective-C selector
	arg  string // what it was given, printed
	args []byte // setBytes contents
	grid [3]int
}

type fakeAPI struct {
	t         *testing.T
	log       []call
	cbs       int
	residency bool
	kernels   map[string]bool
	steps     []*fakeBuffer
}

type fakeBuffer struct {
	addr uint64
	data []byte
}

func (b *fakeBuffer) GPUAddress() uint64 { return b.addr }
func (b *fakeBuffer) Contents() []byte   { return b.data }
func (b *fakeBuffer) Length() int64      { return int64(len(b.data)) }

type fakePipeline string

func (p fakePipeline) Kernel() string { return string(p) }

func (f *fakeAPI) Pipeline(kernel string) (Pipeline, error) {
	if !f.kernels[kernel] {
		return nil, fmt.Errorf("newFunctionWithName: no function %q in the library", kernel)
	}
	f.log = append(f.log, call{cb: -1, name: "newComputePipelineStateWithFunction:error:", arg: kernel})
	return fakePipeline(kernel), nil
}

func (f *fakeAPI) NewCommandBuffer() (CommandBuffer, error) {
	f.log = append(f.log, call{cb: f.cbs, name: "commandBufferWithUnretainedReferences"})
	f.cbs++
	return &fakeCB{f: f, id: f.cbs - 1}, nil
}

func (f *fakeAPI) ResidencySet() bool { return f.residency }

type fakeCB struct {
	f                 *fakeAPI
	id                int
	committed, waited bool
	open              bool
	encoders          int
	stepAtCommit      [][]byte
}

func (c *fakeCB) rec(name, arg string) {
	c.f.log = append(c.f.log, call{cb: c.id, name: name, arg: arg})
}

func (c *fakeCB) ComputeEncoder(concurrent bool) ComputeEncoder {
	if c.committed || c.open {
		c.f.t.Errorf("command buffer %d: an encoder after commit or while another is open", c.id)
	}
	c.open = true
	c.encoders++
	c.rec("computeCommandEncoderWithDispatchType:", fmt.Sprint(map[bool]string{true: "Concurrent", false: "Serial"}[concurrent]))
	return &fakeEncoder{cb: c}
}

// The event's values count command buffers: number id+1 waits for id, then signals id+1.
func (c *fakeCB) WaitForPrevious() {
	if c.id > 0 {
		c.rec("encodeWaitForEvent:value:", fmt.Sprint(c.id))
	}
}
func (c *fakeCB) SignalCompletion() { c.rec("encodeSignalEvent:value:", fmt.Sprint(c.id+1)) }
func (c *fakeCB) Commit() {
	if c.committed || c.open {
		c.f.t.Errorf("command buffer %d committed twice or with an open encoder", c.id)
	}
	c.committed = true
	for _, s := range c.f.steps {
		c.stepAtCommit = append(c.stepAtCommit, append([]byte(nil), s.data...))
	}
	c.rec("commit", "")
}
func (c *fakeCB) Wait() error {
	if !c.committed || c.waited {
		c.f.t.Errorf("command buffer %d waited on before commit or twice", c.id)
	}
	c.waited = true
	c.rec("waitUntilCompleted", "")
	return nil
}

type fakeEncoder struct {
	cb    *fakeCB
	ended bool
}

func (e *fakeEncoder) rec(c call) {
	if e.ended {
		e.cb.f.t.Errorf("command buffer %d: %s after endEncoding", e.cb.id, c.name)
	}
	c.cb = e.cb.id
	e.cb.f.log = append(e.cb.f.log, c)
}
func (e *fakeEncoder) UseResources(bufs []Buffer) {
	e.rec(call{name: "useResources:count:usage:", arg: fmt.Sprint(len(bufs))})
}
func (e *fakeEncoder) SetPipeline(p Pipeline) {
	if p == nil {
		e.cb.f.t.Errorf("setComputePipelineState: nil")
		return
	}
	e.rec(call{name: "setComputePipelineState:", arg: p.Kernel()})
}
func (e *fakeEncoder) SetBytes(b []byte, index int) {
	if len(b) > 4096 || index != 0 {
		e.cb.f.t.Errorf("setBytes: %d bytes at index %d", len(b), index)
	}
	e.rec(call{name: "setBytes:length:atIndex:", args: append([]byte(nil), b...)})
}
func (e *fakeEncoder) Dispatch(groups [3]int, threads int) {
	e.rec(call{name: "dispatchThreadgroups:threadsPerThreadgroup:", grid: groups, arg: fmt.Sprint(threads)})
}
func (e *fakeEncoder) Barrier() { e.rec(call{name: "memoryBarrierWithScope:", arg: "Buffers"}) }
func (e *fakeEncoder) End() {
	e.rec(call{name: "endEncoding"})
	e.ended = true
	e.cb.open = false
}

// addressLowering makes one launch per dispatch whose args are the GPU addresses of its
// operands, args then results, then the step buffer: what the recorded setBytes must
// hold if the encoder bound every operand at its plan offset.
type addressLowering struct{}

func (addressLowering) Lower(d *plan.Dispatch, args, results []Operand, steps uint64) ([][]Launch, error) {
	var b []byte
	for _, o := range append(append([]Operand(nil), args...), results...) {
		b = binary.LittleEndian.AppendUint64(b, o.Addr)
	}
	b = binary.LittleEndian.AppendUint64(b, steps)
	return [][]Launch{{{Kernel: "k_" + d.Op, Grid: [3]int{max(d.Grid[0], 1), max(d.Grid[1], 1), max(d.Grid[2], 1)}, Threads: 256, Args: b}}}, nil
}

func tinyPlans(t *testing.T) []*plan.Plan { return tinyPlansFor(t, "") }

// tinyPlansFor compiles the tiny golden model's decode and prefill (16 tokens) plans for
// a backend's target ("": the CPU's).
func tinyPlansFor(t *testing.T, backend string) []*plan.Plan {
	t.Helper()
	ck, err := checkpoint.Open(fixtures.Golden("mlx-q4"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	g, err := qwen35moe.Build(ck.Config(), qwen35moe.BuildOptions{WeightType: ck.WeightType, KVDType: graph.F32, ConvStateDType: graph.F32})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pipeline.Default().PassConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*plan.Plan
	for _, ph := range []passes.Phase{{Name: "decode", Tokens: 1, Backend: backend}, {Name: "prefill", Tokens: 16, LastLogitsOnly: true, Backend: backend}} {
		p, err := passes.Compile(g, ops.Default, ph, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// fixture binds every buffer of p to a fake buffer at its own GPU address.
func fixture(t *testing.T, p *plan.Plan, inFlight int) (*fakeAPI, Resources) {
	f := &fakeAPI{t: t, kernels: map[string]bool{"argmax": true}}
	for _, d := range p.Dispatches {
		f.kernels["k_"+d.Op] = true
	}
	res := Resources{Buffers: make([]Buffer, len(p.Buffers)), Weights: map[int]Operand{}}
	for _, b := range p.Buffers {
		addr := uint64(b.ID+1) << 32
		switch b.Kind {
		case plan.Weight:
			code, _ := gpu.DTypeCode(b.Type.DType)
			w := kernels.Weight{Data: addr, DType: code}
			if b.Type.DType.Quantized() {
				w.Scales, w.Biases, w.Group = addr+1<<30, addr+3<<29, int32(b.Type.Group)
			}
			res.Weights[b.ID] = Operand{Addr: addr, W: w}
		case plan.Input:
		default:
			fb := &fakeBuffer{addr: addr, data: make([]byte, b.Size(64))}
			res.Buffers[b.ID] = fb
			res.Resident = append(res.Resident, fb)
		}
	}
	for s := 0; s < inFlight; s++ {
		sb := &fakeBuffer{addr: uint64(1000+s) << 32, data: make([]byte, 16+4*p.Tokens)}
		res.Steps = append(res.Steps, sb)
		f.steps = append(f.steps, sb)
		res.Resident = append(res.Resident, sb)
	}
	return f, res
}

// wantAddrs is what the address lowering must have put in dispatch d's args for slot.
func wantAddrs(p *plan.Plan, d *plan.Dispatch, res Resources, slot int) []uint64 {
	var want []uint64
	for _, o := range append(append([]plan.Operand(nil), d.Args...), d.Results...) {
		b := p.Buffers[o.Buffer]
		switch b.Kind {
		case plan.Weight:
			want = append(want, res.Weights[b.ID].Addr)
		case plan.Input:
			want = append(want, res.Steps[slot].GPUAddress()+16+uint64(o.Offset))
		default:
			want = append(want, res.Buffers[b.ID].GPUAddress()+uint64(o.Offset))
		}
	}
	return append(want, res.Steps[slot].GPUAddress())
}

// For each plan, the recorded calls are one dispatch per plan dispatch, one barrier per
// group boundary and nowhere else, every operand bound at its plan offset, and two
// command buffers alternating step slots, step N+1 committed before the CPU waits on N.
func TestEncoderRecordsThePlan(t *testing.T) {
	for _, p := range tinyPlans(t) {
		t.Run(p.Phase, func(t *testing.T) {
			cfg := DefaultConfig
			cfg.TokenHandoff = p.Tokens == 1
			f, res := fixture(t, p, 2)
			e, err := NewEncoder(f, cfg, p, res, addressLowering{})
			if err != nil {
				t.Fatal(err)
			}
			const steps = 4
			var tickets []Ticket
			for s := 0; s < steps; s++ {
				st := Step{Pos: 10 + s*p.Tokens, Capacity: 64, Tokens: make([]int32, p.Tokens)}
				for i := range st.Tokens {
					st.Tokens[i] = int32(100*s + i)
				}
				if cfg.TokenHandoff && s > 0 {
					st.Tokens = nil // the previous step's argmax wrote it
				}
				tk, err := e.Submit(st)
				if err != nil {
					t.Fatal(err)
				}
				tickets = append(tickets, tk)
			}
			for _, tk := range tickets {
				if err := e.Wait(tk); err != nil {
					t.Fatal(err)
				}
			}
			checkRecording(t, f, p, res, cfg, steps)
		})
	}
}

// checkRecording checks the recorded calls of steps command buffers; with the address
// lowering it also checks every operand's address.
func checkRecording(t *testing.T, f *fakeAPI, p *plan.Plan, res Resources, cfg Config, steps int) {
	checkCalls(t, f, p, res, cfg, steps, true)
}

func checkCalls(t *testing.T, f *fakeAPI, p *plan.Plan, res Resources, cfg Config, steps int, addrs bool) {
	t.Helper()
	if f.cbs != steps {
		t.Fatalf("%d command buffers for %d steps", f.cbs, steps)
	}
	handoff := 0
	if cfg.TokenHandoff {
		handoff = 1
	}
	groupStart := map[int]bool{}
	for _, g := range p.Groups[1:] {
		groupStart[g.First] = true
	}
	commitAt, waitAt := map[int]int{}, map[int]int{}
	for cb := 0; cb < steps; cb++ {
		slot := cb % cfg.InFlight
		var dispatches, barriers, resources, waits, signals int
		barrierPending := false
		var encoderKind string
		for i, c := range f.log {
			if c.cb != cb {
				continue
			}
			switch c.name {
			case "computeCommandEncoderWithDispatchType:":
				encoderKind = c.arg
				if cb > 0 && waits != 1 {
					t.Errorf("cb %d: its encoder starts before it waits for the command buffer before it", cb)
				}
			case "encodeWaitForEvent:value:":
				waits++
			case "encodeSignalEvent:value:":
				signals++
			case "useResources:count:usage:":
				resources++
			case "memoryBarrierWithScope:":
				barriers++
				barrierPending = true
			case "setBytes:length:atIndex:":
				if dispatches == len(p.Dispatches) {
					// the token handoff's argmax: it writes the next slot's token
					next := res.Steps[(slot+1)%cfg.InFlight].GPUAddress() + 16
					if got := binary.LittleEndian.Uint64(c.args[8:]); got != next {
						t.Errorf("cb %d: argmax writes %#x, want the next step's token at %#x", cb, got, next)
					}
					if barrierPending != cfg.Concurrent {
						t.Errorf("cb %d: barrier before the token argmax %v, want %v", cb, barrierPending, cfg.Concurrent)
					}
					break
				}
				d := &p.Dispatches[dispatches]
				if want := groupStart[dispatches] && cfg.Concurrent && cfg.PlanBarriers ||
					dispatches > 0 && cfg.Concurrent && !cfg.PlanBarriers; barrierPending != want {
					t.Errorf("cb %d: dispatch %d (%s): barrier before it %v, want %v", cb, dispatches, d.Op, barrierPending, want)
				}
				want := wantAddrs(p, d, res, slot)
				if !addrs {
					want = nil
				}
				for k, w := range want {
					if got := binary.LittleEndian.Uint64(c.args[8*k:]); got != w {
						t.Errorf("cb %d: dispatch %d (%s) operand %d bound at %#x, want %#x", cb, dispatches, d.Op, k, got, w)
					}
				}
			case "dispatchThreadgroups:threadsPerThreadgroup:":
				dispatches++
				barrierPending = false
			case "commit":
				commitAt[cb] = i
			case "waitUntilCompleted":
				waitAt[cb] = i
			}
		}
		if dispatches != len(p.Dispatches)+handoff {
			t.Errorf("cb %d: %d dispatches, the plan has %d (+%d handoff)", cb, dispatches, len(p.Dispatches), handoff)
		}
		wantBarriers := 0
		if cfg.Concurrent {
			wantBarriers = len(p.Groups) - 1 + handoff
			if !cfg.PlanBarriers {
				wantBarriers = len(p.Dispatches) - 1 + handoff
			}
		}
		if barriers != wantBarriers {
			t.Errorf("cb %d: %d barriers, want %d (plan groups %d)", cb, barriers, wantBarriers, len(p.Groups))
		}
		if wantKind := map[bool]string{true: "Concurrent", false: "Serial"}[cfg.Concurrent]; encoderKind != wantKind {
			t.Errorf("cb %d: %q encoder, want %q", cb, encoderKind, wantKind)
		}
		if signals != 1 || (cb > 0) != (waits == 1) || waits > 1 {
			t.Errorf("cb %d: %d event waits and %d signals; each step waits for the one before and signals once", cb, waits, signals)
		}
		if resources != 1 {
			t.Errorf("cb %d: useResources called %d times, want once per encoder", cb, resources)
		}
	}
	for cb := 0; cb+1 < steps; cb++ {
		w, waited := waitAt[cb]
		if !waited {
			continue
		}
		if cfg.InFlight == 2 && commitAt[cb+1] > w {
			t.Errorf("step %d was committed after the CPU waited on step %d (two in flight)", cb+1, cb)
		}
		if cfg.InFlight == 1 && commitAt[cb+1] < w {
			t.Errorf("step %d was committed before step %d completed (one in flight)", cb+1, cb)
		}
	}
}

// Every ablation switch changes the recording as it says (and only that).
func TestEncoderAblations(t *testing.T) {
	p := tinyPlans(t)[0]
	for _, cfg := range []Config{
		{Concurrent: false, PlanBarriers: true, InFlight: 2, TokenHandoff: true},
		{Concurrent: true, PlanBarriers: false, InFlight: 2, TokenHandoff: true},
		{Concurrent: true, PlanBarriers: true, InFlight: 1, TokenHandoff: true},
		{Concurrent: true, PlanBarriers: true, InFlight: 2, TokenHandoff: false},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			f, res := fixture(t, p, cfg.InFlight)
			e, err := NewEncoder(f, cfg, p, res, addressLowering{})
			if err != nil {
				t.Fatal(err)
			}
			for s := 0; s < 3; s++ {
				st := Step{Pos: s, Capacity: 64, Tokens: []int32{int32(s)}}
				if cfg.TokenHandoff && s > 0 {
					st.Tokens = nil
				}
				if _, err := e.Submit(st); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Drain(); err != nil {
				t.Fatal(err)
			}
			checkRecording(t, f, p, res, cfg, 3)
		})
	}
}

// Step scalars land in the step slot's buffer before its command buffer is committed.
func TestEncoderWritesStepScalars(t *testing.T) {
	p := tinyPlans(t)[1]
	cfg := Config{Concurrent: true, PlanBarriers: true, InFlight: 2}
	f, res := fixture(t, p, 2)
	e, err := NewEncoder(f, cfg, p, res, addressLowering{})
	if err != nil {
		t.Fatal(err)
	}
	var cbs []*fakeCB
	for s := 0; s < 3; s++ {
		toks := make([]int32, p.Tokens)
		for i := range toks {
			toks[i] = int32(7*s + i)
		}
		if _, err := e.Submit(Step{Pos: 16 * s, Capacity: 64, Tokens: toks}); err != nil {
			t.Fatal(err)
		}
		cbs = append(cbs, e.pending[s%2].cb.(*fakeCB))
	}
	for s, cb := range cbs {
		step := cb.stepAtCommit[s%2]
		le := binary.LittleEndian
		if pos, T, N := le.Uint32(step[0:]), le.Uint32(step[4:]), le.Uint32(step[8:]); pos != uint32(16*s) || T != uint32(p.Tokens) || N != 64 {
			t.Errorf("step %d committed with C=%d T=%d N=%d", s, pos, T, N)
		}
		if tok := le.Uint32(step[16+4*3:]); tok != uint32(7*s+3) {
			t.Errorf("step %d: token 3 is %d, want %d", s, tok, 7*s+3)
		}
	}
	if _, err := e.Submit(Step{Pos: 0, Capacity: 64}); err == nil || !strings.Contains(err.Error(), "handoff") {
		t.Errorf("a prefill step without tokens: %v", err)
	}
	if _, err := e.Submit(Step{Pos: 0, Capacity: 64, Tokens: []int32{1}}); err == nil {
		t.Error("a step with the wrong token count was accepted")
	}
}

func TestEncoderRefusesBadSetups(t *testing.T) {
	p := tinyPlans(t)[1]
	f, res := fixture(t, p, 2)
	if _, err := NewEncoder(f, Config{Concurrent: true, InFlight: 3}, p, res, addressLowering{}); err == nil {
		t.Error("three command buffers in flight were accepted")
	}
	if _, err := NewEncoder(f, Config{Concurrent: true, InFlight: 2, TokenHandoff: true}, p, res, addressLowering{}); err == nil {
		t.Error("the token handoff was accepted on a prefill plan")
	}
	delete(f.kernels, "k_"+p.Dispatches[0].Op)
	if _, err := NewEncoder(f, Config{Concurrent: true, InFlight: 2}, p, res, addressLowering{}); err == nil || !strings.Contains(err.Error(), "pipeline") {
		t.Errorf("a kernel missing from the library: %v", err)
	}
}

// pipeline.toml's [metal] defaults are the fast configuration, and each key maps to its
// switch.
func TestConfigOfPipeline(t *testing.T) {
	if got := ConfigOf(pipeline.Default().Metal); got != DefaultConfig {
		t.Errorf("default [metal] gives %+v, want %+v", got, DefaultConfig)
	}
	got := ConfigOf(pipeline.Metal{Encoder: "serial", Barriers: "every", InFlight: 1, TokenHandoff: false})
	if want := (Config{Concurrent: false, PlanBarriers: false, InFlight: 1}); got != want {
		t.Errorf("every switch off gives %+v, want %+v", got, want)
	}
}

// Driven by the shared GPU lowering over plans compiled for Metal, the encoder launches
// exactly the plan's dispatches: each one's kernel, grid and group size as the plan's
// select-kernels pass recorded them, in plan order, one launch each.
func TestEncoderLaunchesTheMetalPlan(t *testing.T) {
	for _, p := range tinyPlansFor(t, "metal") {
		t.Run(p.Phase, func(t *testing.T) {
			f, res := fixture(t, p, 2)
			for _, d := range p.Dispatches {
				if d.Kernel == "" {
					t.Fatalf("dispatch %d (%s) has no kernel: was the plan compiled for metal?", d.Index, d.Op)
				}
				f.kernels[d.Kernel] = true
			}
			cfg := DefaultConfig
			cfg.TokenHandoff = p.Tokens == 1
			e, err := NewEncoder(f, cfg, p, res, GPULowering{Target: gpu.Metal, Bind: graph.Bindings{T: p.Tokens, N: 64}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Submit(Step{Pos: 3, Capacity: 64, Tokens: make([]int32, p.Tokens)}); err != nil {
				t.Fatal(err)
			}
			if err := e.Drain(); err != nil {
				t.Fatal(err)
			}
			var kernelsSeen []string
			var grids [][3]int
			var threads []string
			for _, c := range f.log {
				switch {
				case c.cb != 0:
				case c.name == "setComputePipelineState:":
					kernelsSeen = append(kernelsSeen, c.arg)
				case c.name == "dispatchThreadgroups:threadsPerThreadgroup:":
					grids = append(grids, c.grid)
					threads = append(threads, c.arg)
				}
			}
			n := len(p.Dispatches)
			if len(kernelsSeen) != n+map[bool]int{true: 1}[cfg.TokenHandoff] {
				t.Fatalf("%d launches for %d dispatches", len(kernelsSeen), n)
			}
			for i, d := range p.Dispatches {
				if kernelsSeen[i] != d.Kernel || grids[i] != d.Grid || threads[i] != fmt.Sprint(d.Block) {
					t.Errorf("dispatch %d (%s): launched %s grid %v x %s, the plan says %s grid %v x %d", i, d.Op, kernelsSeen[i], grids[i], threads[i], d.Kernel, d.Grid, d.Block)
				}
			}
			checkCalls(t, f, p, res, cfg, 1, false)
		})
	}
}

// The [metal] table reaches the backend: pipeline.ExecOptions carries it in exec.Options,
// exec.Open hands it to the factory in BackendOptions, and the darwin factory builds its
// encoder from ConfigOfOptions; a caller that sets nothing gets the fast defaults.
func TestMetalSwitchesReachTheBackend(t *testing.T) {
	p := pipeline.Default()
	p.Metal = pipeline.Metal{Encoder: "serial", Barriers: "every", InFlight: 1, TokenHandoff: false}
	o, err := p.ExecOptions("metal", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ConfigOfOptions(o.Metal), (Config{InFlight: 1}); got != want {
		t.Errorf("[metal] with every switch off reaches the encoder as %+v, want %+v", got, want)
	}
	if got := ConfigOfOptions(exec.MetalOptions{}); got != DefaultConfig {
		t.Errorf("no [metal] settings give %+v, want the defaults %+v", got, DefaultConfig)
	}
}
