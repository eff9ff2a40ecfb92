//go:build linux

package cuda

import (
	"errors"
	"fmt"

	"pistil/exec"
	"pistil/graph"
)

// state is a session's KV caches, conv and recurrent states in device memory.
type state struct {
	b        *Backend
	capacity int
	addrs    map[string]uint64
	sizes    map[string]int64
	// rowBytes is, for buffers whose first dimension is N (KV caches), the bytes of one
	// context row; 0 for the others.
	rowBytes map[string]int64
	// err is a device error from Export or Zero (which cannot return one); Run reports it.
	err error
	// backup holds a copy of each fixed buffer (no context rows) for a decode stream's
	// Discard (handoff.go); nil until a stream needs it.
	backup map[string]uint64
}

// NewState implements exec.Backend.
func (b *Backend) NewState(specs []exec.StateSpec, capacity int) (exec.State, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("context capacity %d must be positive", capacity)
	}
	s := &state{b: b, capacity: capacity, addrs: map[string]uint64{}, sizes: map[string]int64{}, rowBytes: map[string]int64{}}
	bind := graph.Bindings{N: capacity}
	err := b.dev.do(func() error {
		for _, sp := range specs {
			if sp.Type.DType.Quantized() || sp.Type.IsTuple() {
				return fmt.Errorf("state %s: type %s cannot be a state buffer", sp.Name, sp.Type)
			}
			n := sp.Type.Bytes(bind)
			addr, err := b.dev.alloc(n)
			if err != nil {
				return fmt.Errorf("state %s: %w", sp.Name, err)
			}
			s.addrs[sp.Name], s.sizes[sp.Name] = addr, n
			if len(sp.Type.Shape) > 0 && sp.Type.Shape[0].Sym == graph.SymN && !sp.Type.Shape[0].IsConst() {
				rest := graph.Type{DType: sp.Type.DType, Shape: sp.Type.Shape[1:]}
				s.rowBytes[sp.Name] = rest.Bytes(bind)
			}
		}
		return nil
	})
	if err != nil {
		s.free()
		return nil, err
	}
	return s, nil
}

func (s *state) free() {
	s.b.dev.do(func() error {
		for name, a := range s.addrs {
			s.b.dev.free(a)
			delete(s.addrs, name)
		}
		for _, a := range s.backup {
			s.b.dev.free(a)
		}
		s.backup = nil
		return nil
	})
}

func (s *state) Bytes() int64 {
	var n int64
	for _, v := range s.sizes {
		n += v
	}
	return n
}

// block is a copy of some of a state's buffers: the fixed ones whole, or context rows
// [from, to) of the KV caches (contiguous: N is the first dimension). It is device memory
// (addrs) until it spills to host memory (host), by the prefix cache's policy.
type block struct {
	b        *Backend
	rows     bool
	from, to int
	addrs    map[string]uint64
	host     map[string][]byte
	sizes    map[string]int64
	bytes    int64
}

// StateInDeviceMemory implements exec.DeviceMemoryBackend: state blocks are device
// memory and spill to the host's.
func (b *Backend) StateInDeviceMemory() bool { return true }

func (k *block) Bytes() int64 { return k.bytes }

func (k *block) Release() {
	k.b.dev.do(func() error {
		for _, a := range k.addrs {
			k.b.dev.free(a)
		}
		return nil
	})
	k.addrs, k.host, k.bytes = nil, nil, 0
}

// Spilled implements exec.SpillableBlock.
func (k *block) Spilled() bool { return k.host != nil }

// Spill implements exec.SpillableBlock: each buffer is downloaded (after the stream's
// earlier work) and its device memory freed only once every buffer is on the host, so a
// failed download leaves the block whole on the device.
func (k *block) Spill() error {
	if k.host != nil {
		return nil
	}
	if k.addrs == nil {
		return errors.New("cuda: the state block was released")
	}
	host := make(map[string][]byte, len(k.addrs))
	err := k.b.dev.do(func() error {
		for name, a := range k.addrs {
			buf := make([]byte, k.sizes[name])
			if err := k.b.dev.download(buf, a); err != nil {
				return fmt.Errorf("spill state %s: %w", name, err)
			}
			host[name] = buf
		}
		for _, a := range k.addrs {
			k.b.dev.free(a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	k.addrs, k.host = map[string]uint64{}, host
	return nil
}

func (s *state) SaveFixed() (exec.StateBlock, error) { return s.save(false, 0, 0) }

func (s *state) SaveRows(from, to int) (exec.StateBlock, error) {
	if from < 0 || from > to || to > s.capacity {
		return nil, fmt.Errorf("rows [%d, %d) outside the context capacity %d", from, to, s.capacity)
	}
	return s.save(true, from, to)
}

// save copies device to device on the state's stream (ordered after the steps that
// wrote the rows). A device error is kept, so the session's next step refuses the state.
func (s *state) save(rows bool, from, to int) (exec.StateBlock, error) {
	k := &block{b: s.b, rows: rows, from: from, to: to, addrs: map[string]uint64{}, sizes: map[string]int64{}}
	err := s.b.dev.do(func() error {
		for name, a := range s.addrs {
			rb := s.rowBytes[name]
			if (rb > 0) != rows {
				continue
			}
			src, n := a, s.sizes[name]
			if rows {
				src, n = a+uint64(int64(from)*rb), int64(to-from)*rb
			}
			dst, err := s.b.dev.alloc(n)
			if err != nil {
				return fmt.Errorf("save state %s: %w", name, err)
			}
			k.addrs[name], k.sizes[name] = dst, n
			k.bytes += n
			if err := s.b.dev.d.check("cuMemcpyDtoDAsync "+name, s.b.dev.d.cuMemcpyDtoDAsync(dst, src, uint64(n), s.b.dev.stream)); err != nil {
				return err
			}
		}
		return s.b.dev.sync()
	})
	if err != nil {
		k.Release()
		s.err = err
		return nil, err
	}
	return k, nil
}

// Load copies a block back, device to device (or host to device when it spilled), after
// checking all of it.
func (s *state) Load(sb exec.StateBlock) error {
	k, ok := sb.(*block)
	if !ok {
		return fmt.Errorf("cuda: state block of type %T is not from this backend", sb)
	}
	if k.addrs == nil {
		return errors.New("cuda: the state block was released")
	}
	if err := exec.CheckBlock(k.rows, k.from, k.to, s.capacity, s.sizes, s.rowBytes, k.sizes); err != nil {
		return err
	}
	return s.b.dev.do(func() error {
		for name := range k.sizes {
			dst := s.addrs[name]
			if k.rows {
				dst += uint64(int64(k.from) * s.rowBytes[name])
			}
			if buf, spilled := k.host[name]; spilled {
				if err := s.b.dev.upload(dst, buf); err != nil {
					return fmt.Errorf("load spilled state %s: %w", name, err)
				}
				continue
			}
			if err := s.b.dev.d.check("cuMemcpyDtoDAsync "+name, s.b.dev.d.cuMemcpyDtoDAsync(dst, k.addrs[name], uint64(k.sizes[name]), s.b.dev.stream)); err != nil {
				return err
			}
		}
		return s.b.dev.sync()
	})
}

// Zero clears every buffer; a device error is kept for the next step to report.
func (s *state) Zero() {
	err := s.b.dev.do(func() error {
		if err := s.b.dev.sync(); err != nil {
			return err
		}
		for name, a := range s.addrs {
			if err := s.b.dev.d.check("cuMemsetD8Async "+name, s.b.dev.d.cuMemsetD8Async(a, 0, uint64(s.sizes[name]), s.b.dev.stream)); err != nil {
				return err
			}
		}
		return s.b.dev.sync()
	})
	if err != nil {
		s.err = err
	}
}

// Close frees the state's device buffers; a Run on it afterwards fails.
func (s *state) Close() error {
	s.free()
	if s.err == nil {
		s.err = errStateClosed
	}
	return nil
}

var errStateClosed = errors.New("the session state is closed")
