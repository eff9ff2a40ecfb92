package metal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Device is what the backend needs of a GPU beyond the encoder's API: buffers, no-copy
// views, residency, and the one thread every call must run on. The darwin
// implementation wraps Metal; tests use the CPU emulator.
type Device interface {
	API
	// Do runs f on the device's own thread (Metal's locked OS thread).
	Do(f func() error) error
	// NewBuffer is a zeroed shared buffer of n bytes.
	NewBuffer(n int64) (Buffer, error)
	// NewNoCopyBuffer wraps n bytes at p (page-aligned, whole pages) without copying.
	NewNoCopyBuffer(p unsafe.Pointer, n int64) (Buffer, error)
	// MakeResident keeps bufs resident (a residency set, where the device has them).
	MakeResident(bufs []Buffer) error
	Release(b Buffer)
	MaxBufferLength() int64
	PageSize() int64
	Describe() string
}

// NewBackend is the backend over a device, its encoder configured by cfg (the token
// handoff is off: exec reads every step's logits).
func NewBackend(d Device, cfg Config) *Backend {
	return &Backend{dev: d, cfg: cfg, weights: map[string]Operand{}}
}

// mapViews wraps size bytes of mapped memory at base (page-aligned: a Region) in no-copy
// views covering the spans (PlanViews) and returns them with the view and offset of each
// span.
func mapViews(d Device, base unsafe.Pointer, size int64, spans []Span) ([]Buffer, []int, []int64, error) {
	page := d.PageSize()
	views, err := PlanViews(size, spans, d.MaxBufferLength(), page)
	if err != nil {
		return nil, nil, nil, err
	}
	if uintptr(base)%uintptr(page) != 0 {
		return nil, nil, nil, fmt.Errorf("metal: mapped region at %p is not %d-byte aligned", base, page)
	}
	var bufs []Buffer
	for _, v := range views {
		b, err := d.NewNoCopyBuffer(unsafe.Add(base, v.Off), v.Len)
		if err != nil {
			for _, made := range bufs {
				d.Release(made)
			}
			return nil, nil, nil, err
		}
		bufs = append(bufs, b)
	}
	which, offs := make([]int, len(spans)), make([]int64, len(spans))
	for i, s := range spans {
		if which[i], offs[i], err = Locate(views, s); err != nil {
			return nil, nil, nil, err
		}
	}
	return bufs, which, offs, nil
}

// Backend runs plans compiled for metal on the system default device. One instance
// serves one model: its weights are bound once (no-copy views over the checkpoint's
// mapping where the tensor is the file's bytes, copies where a transform made new ones)
// and shared by every plan.
type Backend struct {
	dev Device
	cfg Config

	mu       sync.Mutex
	weights  map[string]Operand
	resident []Buffer // every buffer of the model's weights, for useResources:
	noCopy   int64    // weight bytes bound without a copy
	copied   int64
	// keep holds every tensor a no-copy view covers: a view over bytes a transform made
	// on the Go heap (not the checkpoint's mapping; Go's heap is mmap'd memory and never
	// moves) must not see them collected.
	keep []*ops.Tensor
}

// Name implements exec.Backend.
func (b *Backend) Name() string { return "metal" }

// Device describes the GPU, its families and how the weights were bound.
func (b *Backend) Device() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%s; weights %d MiB mapped without a copy, %d MiB copied", b.dev.Describe(), b.noCopy>>20, b.copied>>20)
}

// Load implements exec.Backend.
func (b *Backend) Load(p *plan.Plan, weights func(string) (*ops.Tensor, error)) (exec.Program, error) {
	for i := range p.Dispatches {
		if p.Dispatches[i].Kernel == "" {
			return nil, fmt.Errorf("plan %s: dispatch %d (%s) has no kernel; the plan was not compiled for metal", p.Phase, i, p.Dispatches[i].Op)
		}
	}
	prog := &program{b: b, p: p, bufs: make([]Buffer, len(p.Buffers)), logits: -1}
	err := b.dev.Do(func() error {
		if err := b.bindWeights(p, weights); err != nil {
			return err
		}
		for _, buf := range p.Buffers {
			switch buf.Kind {
			case plan.Scratch, plan.Output:
				if buf.PerN != 0 {
					return fmt.Errorf("plan %s: %s buffer %s depends on the context capacity", p.Phase, buf.Kind, buf.Name)
				}
				mb, err := b.dev.NewBuffer(max(buf.Bytes, 16))
				if err != nil {
					return fmt.Errorf("plan %s: %s buffer %s: %w", p.Phase, buf.Kind, buf.Name, err)
				}
				prog.owned = append(prog.owned, mb)
				prog.bufs[buf.ID] = mb
				if buf.Kind == plan.Output && buf.Name == "logits" {
					prog.logits = buf.ID
				}
			case plan.Input:
				if buf.Name != "tokens" {
					return fmt.Errorf("plan %s: unknown input %q", p.Phase, buf.Name)
				}
			}
		}
		if prog.logits < 0 {
			return fmt.Errorf("plan %s has no logits output", p.Phase)
		}
		for s := 0; s < b.cfg.InFlight; s++ {
			sb, err := b.dev.NewBuffer(int64(16 + 4*p.Tokens))
			if err != nil {
				return err
			}
			prog.owned = append(prog.owned, sb)
			prog.steps = append(prog.steps, sb)
		}
		// A residency set (macOS 15+) for the weights and this plan's buffers; without
		// one, every encoder declares them with useResources:.
		b.mu.Lock()
		bufs := append(append([]Buffer(nil), b.resident...), prog.owned...)
		b.mu.Unlock()
		return b.dev.MakeResident(bufs)
	})
	if err != nil {
		prog.release()
		return nil, err
	}
	for _, d := range p.Dispatches {
		if d.Op == "embed" && len(d.Args) > 0 && len(d.Args[0].Type.Shape) > 0 && d.Args[0].Type.Shape[0].IsConst() {
			prog.vocab = d.Args[0].Type.Shape[0].Const
		}
	}
	return prog, nil
}

// bindWeights binds the plan's weights not bound yet. Call on the Metal thread.
func (b *Backend) bindWeights(p *plan.Plan, weights func(string) (*ops.Tensor, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	type piece struct {
		name  string
		part  int // 0 data, 1 scales, 2 biases
		bytes []byte
	}
	var mapped []piece
	var copies []piece
	pending := map[string]*kernels.Weight{}
	for _, buf := range p.Buffers {
		if buf.Kind != plan.Weight {
			continue
		}
		if _, ok := b.weights[buf.Name]; ok || pending[buf.Name] != nil {
			continue
		}
		t, err := weights(buf.Name)
		if err != nil {
			return fmt.Errorf("plan %s: weight %s: %w", p.Phase, buf.Name, err)
		}
		if t.DType != buf.Type.DType {
			return fmt.Errorf("plan %s: weight %s is %s in the checkpoint but the plan was compiled for %s", p.Phase, buf.Name, t.DType, buf.Type.DType)
		}
		data, scales, biases, err := packed(t)
		if err != nil {
			return fmt.Errorf("weight %s: %w", buf.Name, err)
		}
		code, err := gpu.DTypeCode(t.DType)
		if err != nil {
			return fmt.Errorf("weight %s: %w", buf.Name, err)
		}
		pending[buf.Name] = &kernels.Weight{DType: code, Group: int32(t.Group)}
		b.keep = append(b.keep, t)
		for part, pair := range [][2][]byte{{data, t.Data}, {scales, t.Scales}, {biases, t.Biases}} {
			if len(pair[0]) == 0 {
				continue
			}
			pc := piece{buf.Name, part, pair[0]}
			// Bytes the tensor holds itself (the checkpoint's mapping, or a transform's
			// result kept alive in b.keep) may be covered by a no-copy view; only what
			// packed made here is copied.
			if unsafe.SliceData(pair[0]) == unsafe.SliceData(pair[1]) {
				mapped = append(mapped, pc)
			} else {
				copies = append(copies, pc)
			}
		}
	}
	set := func(pc piece, addr uint64) {
		w := pending[pc.name]
		switch pc.part {
		case 0:
			w.Data = addr
		case 1:
			w.Scales = addr
		default:
			w.Biases = addr
		}
	}
	page := b.dev.PageSize()
	addrs, lens := make([]uintptr, len(mapped)), make([]int64, len(mapped))
	for i, pc := range mapped {
		addrs[i], lens[i] = uintptr(unsafe.Pointer(unsafe.SliceData(pc.bytes))), int64(len(pc.bytes))
	}
	for _, r := range PlanRegions(addrs, lens, page) {
		first := mapped[r.Index[0]].bytes
		base := unsafe.Add(unsafe.Pointer(unsafe.SliceData(first)), -r.Spans[0].Off)
		views, which, offs, err := mapViews(b.dev, base, int64(r.End-r.Base), r.Spans)
		if err != nil {
			// Metal refused the mapping (read-only pages, alignment): copy these instead.
			for _, i := range r.Index {
				copies = append(copies, mapped[i])
			}
			continue
		}
		for _, v := range views {
			b.resident = append(b.resident, v)
		}
		for k, i := range r.Index {
			set(mapped[i], views[which[k]].GPUAddress()+uint64(offs[k]))
			b.noCopy += r.Spans[k].Len
		}
	}
	for _, pc := range copies {
		mb, err := b.dev.NewBuffer(int64(len(pc.bytes)))
		if err != nil {
			return fmt.Errorf("weight %s: %w", pc.name, err)
		}
		copy(mb.Contents(), pc.bytes)
		b.resident = append(b.resident, mb)
		set(pc, mb.GPUAddress())
		b.copied += int64(len(pc.bytes))
	}
	for name, w := range pending {
		b.weights[name] = Operand{Addr: w.Data, W: *w}
	}
	return nil
}

// program is a loaded plan; its encoder is built for one session's state at a time.
type program struct {
	b      *Backend
	p      *plan.Plan
	bufs   []Buffer
	steps  []Buffer
	owned  []Buffer
	logits int
	vocab  int

	bound  *state
	enc    *Encoder
	result []float32
	closed bool
}

func (p *program) Tokens() int { return p.p.Tokens }

// Run implements exec.Program: one step, waited on (the logits go back to the caller).
func (p *program) Run(ctx context.Context, st exec.State, tokens []int32, pos int) ([]float32, error) {
	s, ok := st.(*state)
	if !ok {
		return nil, fmt.Errorf("metal: state of another backend")
	}
	if p.closed {
		return nil, errProgramClosed
	}
	if s.closed {
		return nil, errStateClosed
	}
	if len(tokens) != p.p.Tokens {
		return nil, fmt.Errorf("metal: plan %s takes %d tokens, got %d", p.p.Phase, p.p.Tokens, len(tokens))
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
	err := p.b.dev.Do(func() error {
		if p.bound != s {
			if err := p.bind(s); err != nil {
				return err
			}
		}
		tk, err := p.enc.Submit(Step{Pos: pos, Capacity: s.capacity, Tokens: tokens})
		if err != nil {
			return err
		}
		if err := p.enc.Wait(tk); err != nil {
			return fmt.Errorf("plan %s step at position %d: %w", p.p.Phase, pos, err)
		}
		out := p.bufs[p.logits].Contents()
		if cap(p.result) < len(out)/4 {
			p.result = make([]float32, len(out)/4)
		}
		p.result = p.result[:len(out)/4]
		copy(p.result, unsafe.Slice((*float32)(unsafe.Pointer(&out[0])), len(out)/4))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p.result, nil
}

// bind builds the encoder over s's buffers. Call on the Metal thread.
func (p *program) bind(s *state) error {
	res := Resources{Buffers: append([]Buffer(nil), p.bufs...), Weights: map[int]Operand{}, Steps: p.steps}
	p.b.mu.Lock()
	for _, buf := range p.p.Buffers {
		switch buf.Kind {
		case plan.Weight:
			res.Weights[buf.ID] = p.b.weights[buf.Name]
		case plan.State:
			sb, ok := s.bufs[buf.Name]
			if !ok {
				p.b.mu.Unlock()
				return fmt.Errorf("session has no state %q", buf.Name)
			}
			res.Buffers[buf.ID] = sb
		}
	}
	res.Resident = append(append([]Buffer(nil), p.b.resident...), p.steps...)
	p.b.mu.Unlock()
	for _, b := range p.bufs {
		if b != nil {
			res.Resident = append(res.Resident, b)
		}
	}
	for _, sb := range s.bufs {
		res.Resident = append(res.Resident, sb)
	}
	cfg := p.b.cfg
	cfg.TokenHandoff = false // exec reads every step's logits
	enc, err := NewEncoder(p.b.dev, cfg, p.p, res, GPULowering{Target: gpu.Metal, Bind: graph.Bindings{T: p.p.Tokens, N: s.capacity}})
	if err != nil {
		return err
	}
	p.enc, p.bound = enc, s
	return nil
}

func (p *program) release() {
	p.b.dev.Do(func() error {
		for _, b := range p.owned {
			p.b.dev.Release(b)
		}
		p.owned = nil
		return nil
	})
}

// state is a session's KV caches, conv and recurrent states in shared buffers, which the
// CPU reads and writes directly between steps (Run waits for each step).
type state struct {
	b        *Backend
	capacity int
	bufs     map[string]Buffer
	sizes    map[string]int64
	rowBytes map[string]int64 // per buffer whose first dimension is N: one context row
	closed   bool
}

// NewState implements exec.Backend.
func (b *Backend) NewState(specs []exec.StateSpec, capacity int) (exec.State, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("context capacity %d must be positive", capacity)
	}
	s := &state{b: b, capacity: capacity, bufs: map[string]Buffer{}, sizes: map[string]int64{}, rowBytes: map[string]int64{}}
	bind := graph.Bindings{N: capacity}
	err := b.dev.Do(func() error {
		for _, sp := range specs {
			if sp.Type.DType.Quantized() || sp.Type.IsTuple() {
				return fmt.Errorf("state %s: type %s cannot be a state buffer", sp.Name, sp.Type)
			}
			n := sp.Type.Bytes(bind)
			mb, err := b.dev.NewBuffer(max(n, 16))
			if err != nil {
				return fmt.Errorf("state %s: %w", sp.Name, err)
			}
			clear(mb.Contents()) // a session starts from zero state, whatever the allocator gives
			s.bufs[sp.Name], s.sizes[sp.Name] = mb, n
			if len(sp.Type.Shape) > 0 && sp.Type.Shape[0].Sym == graph.SymN && !sp.Type.Shape[0].IsConst() {
				s.rowBytes[sp.Name] = graph.Type{DType: sp.Type.DType, Shape: sp.Type.Shape[1:]}.Bytes(bind)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *state) Bytes() int64 {
	var n int64
	for _, v := range s.sizes {
		n += v
	}
	return n
}

// block is a copy of some of a state's buffers: the fixed ones whole, or context rows
// [from, to) of the KV caches (contiguous: N is the first dimension). The buffers are in
// unified memory, so the copy is a host copy.
type block struct {
	rows     bool
	from, to int
	data     map[string][]byte
	bytes    int64
}

func (k *block) Bytes() int64 { return k.bytes }
func (k *block) Release()     { k.data, k.bytes = nil, 0 }

func (s *state) SaveFixed() (exec.StateBlock, error) { return s.save(false, 0, 0) }

func (s *state) SaveRows(from, to int) (exec.StateBlock, error) {
	if from < 0 || from > to || to > s.capacity {
		return nil, fmt.Errorf("rows [%d, %d) outside the context capacity %d", from, to, s.capacity)
	}
	return s.save(true, from, to)
}

// save copies; Run waits for every step, so no command buffer is writing the state.
func (s *state) save(rows bool, from, to int) (exec.StateBlock, error) {
	if s.closed {
		return nil, errStateClosed
	}
	k := &block{rows: rows, from: from, to: to, data: map[string][]byte{}}
	for name, b := range s.bufs {
		rb := s.rowBytes[name]
		if (rb > 0) != rows {
			continue
		}
		src := b.Contents()[:s.sizes[name]]
		if rows {
			src = src[int64(from)*rb : int64(to)*rb]
		}
		k.data[name] = append([]byte(nil), src...)
		k.bytes += int64(len(src))
	}
	return k, nil
}

// Load writes a block back where it was saved from, after checking all of it.
func (s *state) Load(sb exec.StateBlock) error {
	if s.closed {
		return errStateClosed
	}
	k, ok := sb.(*block)
	if !ok {
		return fmt.Errorf("metal: state block of type %T is not from this backend", sb)
	}
	if k.data == nil {
		return errors.New("metal: the state block was released")
	}
	if err := exec.CheckBlock(k.rows, k.from, k.to, s.capacity, s.sizes, s.rowBytes, exec.BlockSizes(k.data)); err != nil {
		return err
	}
	for name, d := range k.data {
		dst := s.bufs[name].Contents()
		if k.rows {
			dst = dst[int64(k.from)*s.rowBytes[name]:]
		}
		copy(dst, d)
	}
	return nil
}

func (s *state) Zero() {
	for _, b := range s.bufs {
		clear(b.Contents())
	}
}

var (
	errProgramClosed = errors.New("metal: the program is closed")
	errStateClosed   = errors.New("metal: the session state is closed")
)

// Close implements exec.Backend: it releases the weights' buffers (the no-copy views do
// not own the checkpoint's mapping; the model unmaps it).
func (b *Backend) Close() error {
	b.mu.Lock()
	resident := b.resident
	b.resident, b.weights = nil, map[string]Operand{}
	b.mu.Unlock()
	return b.dev.Do(func() error {
		for _, r := range resident {
			b.dev.Release(r)
		}
		return nil
	})
}

// Close implements exec.Program.
func (p *program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.enc != nil {
		p.b.dev.Do(p.enc.Drain)
	}
	p.release()
	p.enc, p.bound = nil, nil
	return nil
}

// Close implements exec.State.
func (s *state) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.b.dev.Do(func() error {
		for name, b := range s.bufs {
			s.b.dev.Release(b)
			delete(s.bufs, name)
		}
		return nil
	})
}
