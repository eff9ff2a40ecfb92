package metal

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/ops/kernels/emu"
	"pistil/plan"
)

// The real encoder driving real kernels: an implementation of the API over the CPU
// emulator of Metal (ops/kernels/emu). A command buffer runs its launches in encoding
// order when committed, so it cannot show what concurrency or a missing barrier would do;
// it shows that every switch of the encoder gives the same answer, and that the GPU token
// handoff feeds each step the token the step before chose.

type emuAPI struct {
	m   *emu.Machine
	mem *emu.Memory
}

type emuBuffer struct {
	mem  *emu.Memory
	addr uint64
	n    int
}

func (b *emuBuffer) GPUAddress() uint64 { return b.addr }
func (b *emuBuffer) Contents() []byte   { return b.mem.Bytes(b.addr, b.n) }
func (b *emuBuffer) Length() int64      { return int64(b.n) }

func (a *emuAPI) buffer(n int) *emuBuffer { return &emuBuffer{a.mem, a.mem.Alloc(n, 0), n} }

func (a *emuAPI) Pipeline(kernel string) (Pipeline, error) { return fakePipeline(kernel), nil }
func (a *emuAPI) NewCommandBuffer() (CommandBuffer, error) { return &emuCB{api: a}, nil }
func (a *emuAPI) ResidencySet() bool                       { return true }

type emuCB struct {
	api      *emuAPI
	launches []emu.Launch
	err      error
	pending  emu.Launch
}

func (c *emuCB) ComputeEncoder(bool) ComputeEncoder { return &emuEncoder{cb: c} }
func (c *emuCB) WaitForPrevious()                   {}
func (c *emuCB) SignalCompletion()                  {}
func (c *emuCB) Commit()                            { c.err = c.api.m.Run(c.api.mem, c.launches, emu.Options{}) }
func (c *emuCB) Wait() error                        { return c.err }

type emuEncoder struct{ cb *emuCB }

func (e *emuEncoder) UseResources([]Buffer)  {}
func (e *emuEncoder) SetPipeline(p Pipeline) { e.cb.pending.Kernel = p.Kernel() }
func (e *emuEncoder) SetBytes(b []byte, _ int) {
	e.cb.pending.Args = rawArgs(append([]byte(nil), b...))
}
func (e *emuEncoder) Dispatch(groups [3]int, threads int) {
	e.cb.pending.Grid, e.cb.pending.Threads = groups, threads
	e.cb.launches = append(e.cb.launches, e.cb.pending)
	e.cb.pending = emu.Launch{}
}
func (e *emuEncoder) Barrier() {}
func (e *emuEncoder) End()     {}

// rawArgs is an args struct already in bytes (emu.Launch takes a struct value).
type rawArgs []byte

var (
	emuOnce    sync.Once
	emuMachine *emu.Machine
	emuErr     error
)

func emulator(t *testing.T) *emu.Machine {
	t.Helper()
	if err := emu.Available(); err != nil {
		t.Skip(err)
	}
	emuOnce.Do(func() { emuMachine, emuErr = emu.Build(kernels.MetalSource()) })
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	return emuMachine
}

var allConfigs = []Config{
	{Concurrent: true, PlanBarriers: true, InFlight: 2},
	{Concurrent: false, PlanBarriers: true, InFlight: 2},
	{Concurrent: true, PlanBarriers: false, InFlight: 2},
	{Concurrent: true, PlanBarriers: true, InFlight: 1},
}

// The barrier-stress plan of the Mac self-test (64 dependent in-place adds) gives the
// same, exact answer under every encoder configuration.
func TestEncoderSwitchesKeepTheAnswer(t *testing.T) {
	m := emulator(t)
	const adds, elems, steps = 16, 1000, 3
	for _, cfg := range allConfigs {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			api := &emuAPI{m: m, mem: &emu.Memory{}}
			p := stressPlan(adds, elems, true)
			res := Resources{Buffers: make([]Buffer, len(p.Buffers))}
			for _, b := range p.Buffers[1:] {
				res.Buffers[b.ID] = api.buffer(int(b.Bytes))
			}
			for s := 0; s < cfg.InFlight; s++ {
				res.Steps = append(res.Steps, api.buffer(64))
			}
			ones := res.Buffers[2].Contents()
			for i := 0; i < elems; i++ {
				binary.LittleEndian.PutUint32(ones[4*i:], math.Float32bits(1))
			}
			e, err := NewEncoder(api, cfg, p, res, addLowering{})
			if err != nil {
				t.Fatal(err)
			}
			for s := 0; s < steps; s++ {
				if _, err := e.Submit(Step{Pos: s, Capacity: 1, Tokens: []int32{0}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Drain(); err != nil {
				t.Fatal(err)
			}
			y := res.Buffers[1].Contents()
			for i := 0; i < elems; i++ {
				if v := math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:])); v != adds*steps {
					t.Fatalf("element %d is %v, want %d", i, v, adds*steps)
				}
			}
		})
	}
}

// chainPlan is a decode plan of one embed whose rows are the logits: row t's largest
// entry is next(t), so greedy decoding walks t, next(t), next(next(t))...
func chainPlan(vocab int) *plan.Plan {
	row := graph.Type{DType: graph.F32, Shape: graph.S(1, vocab)}
	p := &plan.Plan{Model: "chain", Phase: "decode", Tokens: 1, Buffers: []plan.Buffer{
		{ID: 0, Kind: plan.Input, Name: "tokens", Type: graph.Type{DType: graph.I32, Shape: graph.S(1)}, Bytes: 4},
		{ID: 1, Kind: plan.Weight, Name: "table", Type: graph.Type{DType: graph.F32, Shape: graph.S(vocab, vocab)}, Bytes: int64(4 * vocab * vocab)},
		{ID: 2, Kind: plan.Output, Name: "logits", Type: row, Bytes: int64(4 * vocab)},
	}}
	p.Dispatches = []plan.Dispatch{{Op: "embed", Args: []plan.Operand{{Buffer: 1, Type: p.Buffers[1].Type}, {Buffer: 0, Type: p.Buffers[0].Type}},
		Results: []plan.Operand{{Buffer: 2, Type: row}}}}
	p.Groups = []plan.Group{{First: 0, Last: 0}}
	return p
}

func next(t, vocab int) int { return (7*t + 3) % vocab }

type embedLowering struct{}

func (embedLowering) Lower(d *plan.Dispatch, args, results []Operand, steps uint64) ([][]Launch, error) {
	vocab := int32(d.Args[0].Type.Shape[0].Const)
	a := kernels.EmbedArgs{W: args[0].W, Ids: args[1].Addr, Out: results[0].Addr, T: 1, Cols: vocab, Vocab: vocab}
	return [][]Launch{{{Kernel: kernels.KernelEmbed, Grid: [3]int{1, 1, 1}, Threads: 256, Args: argBytes(a)}}}, nil
}

// With the token handoff, each step's input token is the argmax the GPU wrote for it,
// with one or two command buffers in flight; the CPU gives only the first.
func TestTokenHandoffFeedsTheNextStep(t *testing.T) {
	m := emulator(t)
	const vocab, steps = 300, 6
	for _, inFlight := range []int{1, 2} {
		t.Run(fmt.Sprint(inFlight, " in flight"), func(t *testing.T) {
			api := &emuAPI{m: m, mem: &emu.Memory{}}
			p := chainPlan(vocab)
			table := api.buffer(4 * vocab * vocab)
			tb := table.Contents()
			for r := 0; r < vocab; r++ {
				for c := 0; c < vocab; c++ {
					v := float32(math.Sin(float64(r*vocab + c)))
					if c == next(r, vocab) {
						v = 2
					}
					binary.LittleEndian.PutUint32(tb[4*(r*vocab+c):], math.Float32bits(v))
				}
			}
			res := Resources{Buffers: make([]Buffer, 3), Weights: map[int]Operand{1: {Addr: table.addr, W: kernels.Weight{Data: table.addr, DType: kernels.DTF32}}}}
			res.Buffers[2] = api.buffer(4 * vocab)
			for s := 0; s < inFlight; s++ {
				res.Steps = append(res.Steps, api.buffer(64))
			}
			cfg := Config{Concurrent: true, PlanBarriers: true, InFlight: inFlight, TokenHandoff: true}
			e, err := NewEncoder(api, cfg, p, res, embedLowering{})
			if err != nil {
				t.Fatal(err)
			}
			want := 5
			for s := 0; s < steps; s++ {
				st := Step{Pos: s, Capacity: 64}
				if s == 0 {
					st.Tokens = []int32{int32(want)}
				}
				tk, err := e.Submit(st)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Wait(tk); err != nil {
					t.Fatal(err)
				}
				want = next(want, vocab)
				if got := e.Token(tk); got != int32(want) {
					t.Fatalf("step %d chose %d, want %d", s, got, want)
				}
			}
		})
	}
}
