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

// Export copies the state covering the first n context tokens to host memory. A device
// error is returned and also kept, so the session's next step refuses the state too.
func (s *state) Export(n int) (map[string][]byte, error) {
	out := make(map[string][]byte, len(s.addrs))
	err := s.b.dev.do(func() error {
		if err := s.b.dev.sync(); err != nil {
			return err
		}
		for name, a := range s.addrs {
			size := s.sizes[name]
			if rb := s.rowBytes[name]; rb > 0 {
				size = min(int64(n)*rb, size)
			}
			buf := make([]byte, size)
			if err := s.b.dev.download(buf, a); err != nil {
				return fmt.Errorf("export state %s: %w", name, err)
			}
			out[name] = buf
		}
		return nil
	})
	if err != nil {
		s.err = err
		return nil, err
	}
	return out, nil
}

func (s *state) Import(data map[string][]byte) error {
	if err := exec.CheckImport(data, s.sizes, s.rowBytes); err != nil {
		return err
	}
	return s.b.dev.do(func() error {
		if err := s.b.dev.sync(); err != nil {
			return err
		}
		for name, d := range data {
			if err := s.b.dev.upload(s.addrs[name], d); err != nil {
				return fmt.Errorf("import state %s: %w", name, err)
			}
		}
		return nil
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
