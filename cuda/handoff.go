//go:build linux

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"pistil/exec"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
)

// Device-sampled decoding with token handoff (exec.DeviceDecoder).
//
// A decode program has two step slots, each a step buffer (the scalars, then the input
// token) with the plan lowered against it (its own launches and CUDA graph). A step in
// slot s runs the plan, then the sample kernel, which reads the logits and writes the
// chosen token into the other slot's input token; a 4-byte copy puts the token in
// page-locked host memory and an event marks it there. So step k+1 is queued, reading
// its input on the device, before the host waits for token k, and the host only reads
// tokens (to stream them and check stops).
//
// A stop found in token k leaves step k+1 run or running: it has written a KV row past
// the session's length (harmless: rows at or past Len are rewritten before they are
// read) and advanced the conv and recurrent state and the logits in place (not
// invertible). So before every step but a stream's first, the stream copies the fixed
// state (every buffer without context rows) and the logits to a backup on the device;
// Discard copies them back. The copy costs the fixed state's bytes twice per token
// (about 63 MB for the 35B-A3B: some 30 µs of an H200's bandwidth) against the 1 MB of
// logits, their copy to the host and the host's sampling it removes; keeping two copies
// of the state and lowering each step out of place would remove it too (not done).

// handoff is a program's device-sampling resources, made on its first StartDecode.
type handoff struct {
	// steps[1] is the second slot's step buffer (steps[0] is the program's own), draws
	// the two slots' draw counters (int32 each).
	steps [2]uint64
	draws uint64
	// alt is slot 1's lowering against bound (slot 0's is the program's own launches).
	alt       *lowered
	altGraph  uintptr
	altExec   uintptr
	bound     *state
	counts    uint64 // [V] int32: how often each token was generated (penalties)
	logitsBak uint64
	pinned    unsafe.Pointer // [2]int32 page-locked: each slot's chosen token
	events    [2]uintptr
	owned     []uint64
}

func (h *handoff) release(g *device) {
	if h == nil {
		return
	}
	h.dropAlt(g)
	for _, a := range h.owned {
		g.free(a)
	}
	h.owned = nil
	if h.pinned != nil {
		g.d.cuMemFreeHost(h.pinned)
		h.pinned = nil
	}
}

func (h *handoff) dropAlt(g *device) {
	if h.altExec != 0 {
		g.d.cuGraphExecDestroy(h.altExec)
		h.altExec = 0
	}
	if h.altGraph != 0 {
		g.d.cuGraphDestroy(h.altGraph)
		h.altGraph = 0
	}
	h.alt, h.bound = nil, nil
}

// newHandoff allocates the second slot, the counts, the logits backup, the pinned
// tokens and the events. Call on the device.
func (p *program) newHandoff() (*handoff, error) {
	g := p.b.dev
	h := &handoff{}
	alloc := func(n int64) (uint64, error) {
		a, err := g.alloc(n)
		if err == nil {
			h.owned = append(h.owned, a)
		}
		return a, err
	}
	var err error
	h.steps[0] = p.steps
	if h.steps[1], err = alloc(int64(16 + 4*p.p.Tokens)); err != nil {
		h.release(g)
		return nil, err
	}
	if h.draws, err = alloc(8); err != nil {
		h.release(g)
		return nil, err
	}
	if h.counts, err = alloc(int64(4 * p.vocab)); err != nil {
		h.release(g)
		return nil, err
	}
	if h.logitsBak, err = alloc(int64(len(p.logitsHost))); err != nil {
		h.release(g)
		return nil, err
	}
	if err := g.d.check("cuMemAllocHost", g.d.cuMemAllocHost(&h.pinned, 8)); err != nil {
		h.release(g)
		return nil, err
	}
	for i := range h.events {
		if err := g.d.check("cuEventCreate", g.d.cuEventCreate(&h.events[i], eventDisableTiming)); err != nil {
			h.release(g)
			return nil, err
		}
	}
	return h, nil
}

// eventDisableTiming is CU_EVENT_DISABLE_TIMING: the events only mark completion.
const eventDisableTiming = 2

// StartDecode implements exec.DeviceDecoder.
func (p *program) StartDecode(st exec.State, sp exec.DeviceSampling) (exec.DecodeStream, error) {
	if p.closed {
		return nil, errProgramClosed
	}
	if p.p.Tokens != 1 {
		return nil, fmt.Errorf("cuda: device sampling needs the decode plan (1 token); plan %s takes %d", p.p.Phase, p.p.Tokens)
	}
	if p.vocab <= 0 || int64(4*p.vocab) != int64(len(p.logitsHost)) {
		return nil, fmt.Errorf("cuda: plan %s has %d bytes of logits for a vocabulary of %d", p.p.Phase, len(p.logitsHost), p.vocab)
	}
	s, ok := st.(*state)
	if !ok {
		return nil, fmt.Errorf("cuda: state of another backend")
	}
	if s.err != nil {
		return nil, fmt.Errorf("cuda: session state is unusable after a device error: %w", s.err)
	}
	args, err := sampleArgs(sp, p.vocab)
	if err != nil {
		return nil, err
	}
	g := p.b.dev
	d := &decodeStream{p: p, s: s, firstDraw: sp.FirstDraw}
	err = g.do(func() error {
		if p.handoff == nil {
			h, err := p.newHandoff()
			if err != nil {
				return err
			}
			p.handoff = h
		}
		h := p.handoff
		if p.bound != s {
			if err := p.bind(s); err != nil {
				return err
			}
		}
		if h.bound != s {
			h.dropAlt(g)
			low, err := p.lower(s, h.steps[1])
			if err != nil {
				return err
			}
			if p.b.graphs {
				if h.altGraph, h.altExec, err = p.buildGraph(low.launches); err != nil {
					return err
				}
			}
			h.alt, h.bound = low, s
		}
		if err := s.ensureBackup(); err != nil {
			return err
		}
		if err := g.d.check("cuMemsetD8Async (token counts)", g.d.cuMemsetD8Async(h.counts, 0, uint64(4*p.vocab), g.stream)); err != nil {
			return err
		}
		for slot := range d.sample {
			a := args
			a.Logits = p.bufs[p.logits].addr
			if sp.Params.PresencePenalty != 0 || sp.Params.FrequencyPenalty != 0 {
				a.Counts = h.counts
			}
			a.In = h.steps[slot] + 16
			a.Step = h.draws + uint64(4*slot)
			a.Out = h.steps[1-slot] + 16
			l, err := g.newLaunch(kernels.KernelSample, [3]int{1, 1, 1}, kernels.SampleThreads, &a, unsafe.Pointer(&a))
			if err != nil {
				return err
			}
			d.sample[slot] = l
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// sampleArgs are the kernel's sampling parameters (the addresses are the stream's).
func sampleArgs(sp exec.DeviceSampling, vocab int) (kernels.SampleArgs, error) {
	q := sp.Params
	for _, v := range []struct {
		name string
		x    float64
	}{{"temperature", q.Temperature}, {"top-p", q.TopP}, {"min-p", q.MinP}, {"presence penalty", q.PresencePenalty}, {"frequency penalty", q.FrequencyPenalty}} {
		if math.IsNaN(v.x) || math.IsInf(v.x, 0) {
			return kernels.SampleArgs{}, fmt.Errorf("cuda: sampling %s %v is not a finite number", v.name, v.x)
		}
	}
	topK := q.TopK
	if topK < 0 || topK > vocab {
		topK = 0
	}
	return kernels.SampleArgs{V: int32(vocab), TopK: int32(topK), SeedLo: int32(uint32(sp.Seed)), SeedHi: int32(uint32(sp.Seed >> 32)),
		Temperature: float32(max(q.Temperature, 0)), TopP: float32(q.TopP), MinP: float32(q.MinP),
		Presence: float32(q.PresencePenalty), Frequency: float32(q.FrequencyPenalty)}, nil
}

// decodeStream is exec.DecodeStream over a program's two step slots.
type decodeStream struct {
	p         *program
	s         *state
	sample    [2]*launch
	firstDraw int
	// submitted steps so far, read of them (Token), and whether the newest was discarded.
	submitted, read int
	discarded       bool
	backedUp        bool        // the newest step ran ahead, its state before it backed up
	host            [2][6]int32 // per slot: the step scalars, the input token, the draw counter
	closed          bool
}

// Submit implements exec.DecodeStream.
func (d *decodeStream) Submit(pos int, token int32) error {
	switch {
	case d.closed || d.discarded:
		return errors.New("cuda: decode stream is closed")
	case d.submitted-d.read >= 2:
		return errors.New("cuda: two decode steps are in flight already; read a token first")
	case token < 0 && d.submitted == 0:
		return errors.New("cuda: the first step of a decode stream needs its input token")
	case token >= int32(d.p.vocab):
		return fmt.Errorf("token id %d at position %d is outside the vocabulary [0, %d)", token, pos, d.p.vocab)
	case pos < 0 || pos >= d.s.capacity:
		return fmt.Errorf("context full: 1 token at position %d exceeds the session capacity %d", pos, d.s.capacity)
	}
	p, h, g := d.p, d.p.handoff, d.p.b.dev
	slot := d.submitted % 2
	// A step queued while the one before is unread runs ahead of the host: it may have
	// to be discarded.
	ahead := d.submitted > d.read
	step := &d.host[slot]
	step[0], step[1], step[2], step[3], step[4], step[5] = int32(pos), 1, int32(d.s.capacity), 0, token, int32(d.firstDraw+d.submitted)
	err := g.do(func() error {
		if p.bound != d.s || h.bound != d.s {
			return errors.New("cuda: the program ran another session's state during this decode stream")
		}
		if ahead {
			// The state after the step before, in case this step is discarded.
			if err := d.s.backupFixed(); err != nil {
				return err
			}
			if err := g.d.check("cuMemcpyDtoDAsync (logits backup)", g.d.cuMemcpyDtoDAsync(h.logitsBak, p.bufs[p.logits].addr, uint64(len(p.logitsHost)), g.stream)); err != nil {
				return err
			}
		}
		n := uint64(16)
		if token >= 0 {
			n = 20
		}
		if err := g.d.check("cuMemcpyHtoDAsync (step scalars)", g.d.cuMemcpyHtoDAsync(h.steps[slot], unsafe.Pointer(&step[0]), n, g.stream)); err != nil {
			return err
		}
		if err := g.d.check("cuMemcpyHtoDAsync (draw counter)", g.d.cuMemcpyHtoDAsync(h.draws+uint64(4*slot), unsafe.Pointer(&step[5]), 4, g.stream)); err != nil {
			return err
		}
		launches, exe := p.launches, p.exec
		if slot == 1 {
			launches, exe = h.alt.launches, h.altExec
		}
		if prof := currentProfile(); prof != nil {
			if err := p.runProfiledLaunches(prof, launches); err != nil {
				return err
			}
		} else if p.b.graphs {
			if err := g.d.check("cuGraphLaunch", g.d.cuGraphLaunch(exe, g.stream)); err != nil {
				return err
			}
		} else {
			for _, l := range launches {
				if err := g.run(l); err != nil {
					return err
				}
			}
		}
		if err := g.run(d.sample[slot]); err != nil {
			return err
		}
		dst := unsafe.Add(h.pinned, 4*slot)
		if err := g.d.check("cuMemcpyDtoHAsync (token)", g.d.cuMemcpyDtoHAsync(dst, h.steps[1-slot]+16, 4, g.stream)); err != nil {
			return err
		}
		return g.d.check("cuEventRecord", g.d.cuEventRecord(h.events[slot], g.stream))
	})
	if err != nil {
		d.s.err = err
		return err
	}
	d.submitted++
	d.backedUp = ahead
	return nil
}

// wait blocks until step i (from 0) has completed.
func (d *decodeStream) wait(i int) error {
	g, h := d.p.b.dev, d.p.handoff
	err := g.do(func() error {
		return g.d.check("cuEventSynchronize", g.d.cuEventSynchronize(h.events[i%2]))
	})
	if err != nil {
		d.s.err = err
		return fmt.Errorf("plan %s decode step: %w", d.p.p.Phase, err)
	}
	return nil
}

// Token implements exec.DecodeStream.
func (d *decodeStream) Token() (int32, error) {
	if d.read >= d.submitted || (d.discarded && d.read == d.submitted-1) {
		return 0, errors.New("cuda: no decode step left to read")
	}
	if err := d.wait(d.read); err != nil {
		return 0, err
	}
	id := *(*int32)(unsafe.Add(d.p.handoff.pinned, 4*(d.read%2)))
	d.read++
	return id, nil
}

// Discard implements exec.DecodeStream.
func (d *decodeStream) Discard() error {
	if d.discarded || !d.backedUp || d.read != d.submitted-1 {
		return fmt.Errorf("cuda: nothing to discard (%d steps submitted, %d read)", d.submitted, d.read)
	}
	if err := d.wait(d.submitted - 1); err != nil {
		return err
	}
	p, h, g := d.p, d.p.handoff, d.p.b.dev
	err := g.do(func() error {
		if err := d.s.restoreFixed(); err != nil {
			return err
		}
		if err := g.d.check("cuMemcpyDtoDAsync (logits restore)", g.d.cuMemcpyDtoDAsync(p.bufs[p.logits].addr, h.logitsBak, uint64(len(p.logitsHost)), g.stream)); err != nil {
			return err
		}
		return g.sync()
	})
	if err != nil {
		d.s.err = err
		return err
	}
	d.discarded = true
	return nil
}

// Close implements exec.DecodeStream.
func (d *decodeStream) Close() ([]float32, error) {
	if d.closed {
		return nil, errors.New("cuda: decode stream is closed")
	}
	d.closed = true
	p, g := d.p, d.p.b.dev
	err := g.do(func() error {
		if err := g.sync(); err != nil {
			return err
		}
		out := p.bufs[p.logits].addr
		if err := g.d.check("cuMemcpyDtoHAsync (logits)", g.d.cuMemcpyDtoHAsync(unsafe.Pointer(&p.logitsHost[0]), out, uint64(len(p.logitsHost)), g.stream)); err != nil {
			return err
		}
		return g.sync()
	})
	if err != nil {
		d.s.err = err
		return nil, err
	}
	return (&ops.Tensor{DType: graph.F32, Data: p.logitsHost}).F32(), nil
}

// ensureBackup allocates the backup of the fixed state buffers. Call on the device.
func (s *state) ensureBackup() error {
	if s.backup != nil {
		return nil
	}
	backup := map[string]uint64{}
	for name, a := range s.addrs {
		if s.rowBytes[name] > 0 || a == 0 {
			continue
		}
		b, err := s.b.dev.alloc(s.sizes[name])
		if err != nil {
			for _, made := range backup {
				s.b.dev.free(made)
			}
			return fmt.Errorf("backup of state %s: %w", name, err)
		}
		backup[name] = b
	}
	s.backup = backup
	return nil
}

// backupFixed queues a copy of the fixed state buffers to the backup; restoreFixed the
// copy back. Call on the device.
func (s *state) backupFixed() error {
	for name, b := range s.backup {
		if err := s.b.dev.d.check("cuMemcpyDtoDAsync (backup "+name+")", s.b.dev.d.cuMemcpyDtoDAsync(b, s.addrs[name], uint64(s.sizes[name]), s.b.dev.stream)); err != nil {
			return err
		}
	}
	return nil
}

func (s *state) restoreFixed() error {
	for name, b := range s.backup {
		if err := s.b.dev.d.check("cuMemcpyDtoDAsync (restore "+name+")", s.b.dev.d.cuMemcpyDtoDAsync(s.addrs[name], b, uint64(s.sizes[name]), s.b.dev.stream)); err != nil {
			return err
		}
	}
	return nil
}
