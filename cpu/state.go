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

// block is a copy of some of a state's buffers: the fixed ones whole, or context rows
// [from, to) of the KV caches.
type block struct {
	rows     bool
	from, to int
	data     map[string][]byte
	bytes    int64
}

func (b *block) Bytes() int64 { return b.bytes }
func (b *block) Release()     { b.data, b.bytes = nil, 0 }

func (s *state) SaveFixed() (exec.StateBlock, error) {
	b := &block{data: map[string][]byte{}}
	for name, t := range s.bufs {
		if s.rowBytes[name] == 0 {
			b.data[name] = append([]byte(nil), t.Data...)
			b.bytes += int64(len(t.Data))
		}
	}
	return b, nil
}

func (s *state) SaveRows(from, to int) (exec.StateBlock, error) {
	if from < 0 || from > to || to > s.capacity {
		return nil, fmt.Errorf("rows [%d, %d) outside the context capacity %d", from, to, s.capacity)
	}
	b := &block{rows: true, from: from, to: to, data: map[string][]byte{}}
	for name, t := range s.bufs {
		if rb := s.rowBytes[name]; rb > 0 {
			b.data[name] = append([]byte(nil), t.Data[int64(from)*rb:int64(to)*rb]...)
			b.bytes += int64(to-from) * rb
		}
	}
	return b, nil
}

// Load checks the whole block against the state's buffers before writing anything.
func (s *state) Load(sb exec.StateBlock) error {
	b, ok := sb.(*block)
	if !ok {
		return fmt.Errorf("cpu: state block of type %T is not from this backend", sb)
	}
	if b.data == nil {
		return fmt.Errorf("cpu: the state block was released")
	}
	if err := exec.CheckBlock(b.rows, b.from, b.to, s.capacity, s.sizes, s.rowBytes, exec.BlockSizes(b.data)); err != nil {
		return err
	}
	for name, d := range b.data {
		off := int64(0)
		if b.rows {
			off = int64(b.from) * s.rowBytes[name]
		}
		copy(s.bufs[name].Data[off:], d)
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
