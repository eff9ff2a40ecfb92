package cpu

import (
	"fmt"
	"unsafe"

	"pistil/exec"
	"pistil/graph"
	"pistil/ops"
)

// state is a session's buffers in host memory.
type state struct {
	capacity int
	bufs     map[string]*ops.Tensor
	// rowBytes is, for buffers whose first dimension is the context capacity N (KV
	// caches), the bytes of one context row; 0 for the others.
	rowBytes map[string]int64
	sizes    map[string]int64
}

// NewState implements exec.Backend.
func (b *Backend) NewState(specs []exec.StateSpec, capacity int) (exec.State, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("context capacity %d must be positive", capacity)
	}
	s := &state{capacity: capacity, bufs: map[string]*ops.Tensor{}, rowBytes: map[string]int64{}, sizes: map[string]int64{}}
	bind := graph.Bindings{N: capacity}
	for _, sp := range specs {
		if sp.Type.DType.Quantized() || sp.Type.IsTuple() {
			return nil, fmt.Errorf("state %s: type %s cannot be a state buffer", sp.Name, sp.Type)
		}
		shape := sp.Type.Shape.Eval(bind)
		s.bufs[sp.Name] = ops.NewTensor(sp.Type.DType, shape...)
		s.sizes[sp.Name] = int64(len(s.bufs[sp.Name].Data))
		if len(sp.Type.Shape) > 0 && sp.Type.Shape[0].Sym == graph.SymN {
			rest := graph.Type{DType: sp.Type.DType, Shape: sp.Type.Shape[1:]}
			s.rowBytes[sp.Name] = rest.Bytes(bind)
		}
	}
	return s, nil
}

func (s *state) Bytes() int64 {
	var n int64
	for _, t := range s.bufs {
		n += int64(len(t.Data))
	}
	return n
}

func (s *state) Export(n int) (map[string][]byte, error) {
	out := make(map[string][]byte, len(s.bufs))
	for name, t := range s.bufs {
		data := t.Data
		if rb := s.rowBytes[name]; rb > 0 {
			data = data[:int64(n)*rb]
		}
		out[name] = append([]byte(nil), data...)
	}
	return out, nil
}

func (s *state) Import(data map[string][]byte) error {
	if err := exec.CheckImport(data, s.sizes, s.rowBytes); err != nil {
		return err
	}
	for name, d := range data {
		copy(s.bufs[name].Data, d)
	}
	return nil
}

func (s *state) Zero() {
	for _, t := range s.bufs {
		clear(t.Data)
	}
}

func int32Bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// Close drops the buffers so their memory is freed even while the state value is still
// referenced; the state has no buffers afterwards (a Run on it fails).
func (s *state) Close() error {
	s.bufs, s.sizes, s.rowBytes = map[string]*ops.Tensor{}, map[string]int64{}, map[string]int64{}
	return nil
}
