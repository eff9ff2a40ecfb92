package exec

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// KVBlockTokens is the context rows of one KV block: snapshots share the KV caches in
// blocks of this many rows (the last block of a snapshot may be shorter).
const KVBlockTokens = 256

// KVBlock is a copy of KV cache rows [Start, End) of every attention layer, held by the
// backend. KV rows are append-only, so every snapshot of a conversation (and of another
// conversation with the same prefix, cut the same way) shares the blocks before its
// length instead of copying them. A block lives while a snapshot holds it.
type KVBlock struct {
	Start, End int
	rows       StateBlock
	refs       atomic.Int32
}

// Bytes is the memory the block holds.
func (b *KVBlock) Bytes() int64 { return b.rows.Bytes() }

// OnDevice says whether the block's rows are in device memory, apart from the host's.
func (b *KVBlock) OnDevice() bool { return onDevice(b.rows) }

// Spill moves the block's rows to host memory (a GPU backend's; elsewhere it does
// nothing). Restoring a snapshot that holds it then uploads the rows.
func (b *KVBlock) Spill() error { return spill(b.rows) }

func (b *KVBlock) live() bool { return b.refs.Load() > 0 }

func (b *KVBlock) hold() { b.refs.Add(1) }

func (b *KVBlock) drop() {
	if b.refs.Add(-1) == 0 {
		b.rows.Release()
	}
}

// Snapshot is a session's state at Len tokens: its own copy of the conv and recurrent
// state and of the logits after the last token, and the KV blocks covering rows
// [0, Len), shared. The Gated DeltaNet state cannot be rolled back, so reusing a prefix
// of a conversation means restoring a snapshot taken at exactly that prefix length.
type Snapshot struct {
	Len      int
	fixed    StateBlock
	logits   []float32
	kv       []*KVBlock
	released atomic.Bool
}

// Bytes is the memory the snapshot holds by itself (state and logits), without the KV
// blocks it shares (KV).
func (s *Snapshot) Bytes() int64 { return s.fixed.Bytes() + int64(4*len(s.logits)) }

// OnDevice says whether the snapshot's own state is in device memory, apart from the
// host's (its logits are always host memory).
func (s *Snapshot) OnDevice() bool { return onDevice(s.fixed) }

// Spill moves the snapshot's own state to host memory (a GPU backend's; elsewhere it does
// nothing); its KV blocks stay where they are. Restoring it then uploads the state.
func (s *Snapshot) Spill() error {
	if s.released.Load() {
		return errSnapshotReleased
	}
	return spill(s.fixed)
}

// FixedBytes is the snapshot's own conv and recurrent state, without the logits.
func (s *Snapshot) FixedBytes() int64 { return s.fixed.Bytes() }

// KV lists the KV blocks the snapshot references, in order.
func (s *Snapshot) KV() []*KVBlock { return s.kv }

// Release frees the snapshot's own copy and its hold on its KV blocks (a block goes when
// no snapshot holds it). Safe to call twice; the snapshot cannot be restored afterwards.
func (s *Snapshot) Release() {
	if s.released.Swap(true) {
		return
	}
	s.fixed.Release()
	for _, b := range s.kv {
		b.drop()
	}
}

var errSnapshotReleased = errors.New("the snapshot was released")

// Snapshot copies the session's state: the conv and recurrent state and the KV rows it
// does not already hold in a block.
func (s *Session) Snapshot() (*Snapshot, error) { return s.snapshot(nil) }

func (s *Session) snapshot(share func(start, end int) *KVBlock) (*Snapshot, error) {
	if s.st == nil {
		return nil, errSessionClosed
	}
	fixed, err := s.st.SaveFixed()
	if err != nil {
		return nil, fmt.Errorf("snapshot at %d tokens: %w", s.n, err)
	}
	snap := &Snapshot{Len: s.n, fixed: fixed, logits: slices.Clone(s.logits)}
	for start := 0; start < s.n; start += KVBlockTokens {
		end := min(start+KVBlockTokens, s.n)
		b, err := s.kvBlock(start, end, share)
		if err != nil {
			snap.Release()
			return nil, fmt.Errorf("snapshot at %d tokens: %w", s.n, err)
		}
		b.hold()
		snap.kv = append(snap.kv, b)
	}
	return snap, nil
}

// kvBlock returns a block of rows [start, end): the one the state holds there already,
// one share offers, or a new copy.
func (s *Session) kvBlock(start, end int, share func(start, end int) *KVBlock) (*KVBlock, error) {
	k := start / KVBlockTokens
	if k >= len(s.resident) {
		s.resident = append(s.resident, make([]*KVBlock, k+1-len(s.resident))...)
	}
	if b := s.resident[k]; b != nil && b.live() && b.Start == start && b.End == end {
		return b, nil
	}
	if share != nil {
		if b := share(start, end); b != nil && b.live() && b.Start == start && b.End == end {
			s.resident[k] = b
			return b, nil
		}
	}
	rows, err := s.st.SaveRows(start, end)
	if err != nil {
		return nil, err
	}
	b := &KVBlock{Start: start, End: end, rows: rows}
	s.resident[k] = b
	return b, nil
}

// overwrite forgets the resident blocks that rows [from, to) are about to overwrite.
func (s *Session) overwrite(from, to int) {
	for k := from / KVBlockTokens; k < len(s.resident) && k*KVBlockTokens < to; k++ {
		if b := s.resident[k]; b != nil && b.End > from {
			s.resident[k] = nil
		}
	}
}

// Restore makes the session exactly as it was when snap was taken (from this model):
// the KV blocks the state does not hold already are copied in (on the device), then the
// conv and recurrent state, and the length is set.
func (s *Session) Restore(snap *Snapshot) error {
	if s.st == nil {
		return errSessionClosed
	}
	if snap.released.Load() {
		return errSnapshotReleased
	}
	if snap.Len > s.capacity {
		return fmt.Errorf("snapshot of %d tokens exceeds the session capacity %d", snap.Len, s.capacity)
	}
	for _, b := range snap.kv {
		k := b.Start / KVBlockTokens
		if k >= len(s.resident) {
			s.resident = append(s.resident, make([]*KVBlock, k+1-len(s.resident))...)
		}
		if s.resident[k] == b {
			continue
		}
		s.resident[k] = nil
		if err := s.st.Load(b.rows); err != nil {
			s.Reset()
			return fmt.Errorf("restore KV rows [%d, %d): %w", b.Start, b.End, err)
		}
		s.resident[k] = b
	}
	if err := s.st.Load(snap.fixed); err != nil {
		s.Reset()
		return fmt.Errorf("restore state: %w", err)
	}
	s.n = snap.Len
	s.logits = append(s.logits[:0], snap.logits...)
	return nil
}

// DeviceMemoryBackend is a backend whose session state lives in device memory apart from
// the host's (a discrete GPU): its state blocks are SpillableBlocks.
type DeviceMemoryBackend interface {
	StateInDeviceMemory() bool
}

// StateInDeviceMemory says whether the model's session state, and so the prefix cache's
// snapshots and KV blocks, live in device memory apart from the host's, where they can
// spill to host memory.
func (m *Model) StateInDeviceMemory() bool {
	d, ok := m.backend.(DeviceMemoryBackend)
	return ok && d.StateInDeviceMemory()
}
