package cpu

import (
	"testing"

	"pistil/exec"
	"pistil/graph"
)

// Blocks copy the fixed buffers whole and the KV caches by rows, and load back exactly
// where they came from; a block of other buffers is refused before anything is written.
func TestStateBlocks(t *testing.T) {
	b := &Backend{}
	specs := []exec.StateSpec{
		{Name: "kv", Type: graph.TensorType(graph.F32, graph.N, graph.D(2))},
		{Name: "rec", Type: graph.TensorType(graph.F32, graph.D(3))},
	}
	st, err := b.NewState(specs, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*state)
	for i := range s.bufs["kv"].F32() {
		s.bufs["kv"].F32()[i] = float32(i + 1)
	}
	copy(s.bufs["rec"].F32(), []float32{7, 8, 9})
	fixed, err := st.SaveFixed()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := st.SaveRows(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if fixed.Bytes() != 3*4 || rows.Bytes() != 2*2*4 {
		t.Fatalf("block sizes fixed %d rows %d: want the recurrent state and 2 KV rows", fixed.Bytes(), rows.Bytes())
	}
	st.Zero()
	if err := st.Load(rows); err != nil {
		t.Fatal(err)
	}
	if err := st.Load(fixed); err != nil {
		t.Fatal(err)
	}
	if got := s.bufs["kv"].F32(); got[1] != 0 || got[2] != 3 || got[5] != 6 || got[6] != 0 {
		t.Fatalf("kv after loading rows 1..3: %v", got)
	}
	if got := s.bufs["rec"].F32(); got[2] != 9 {
		t.Fatalf("rec after load: %v", got)
	}
	other, _ := b.NewState([]exec.StateSpec{{Name: "rec2", Type: graph.TensorType(graph.F32, graph.D(3))}}, 4)
	if err := other.Load(fixed); err == nil {
		t.Fatal("a block of other buffers was accepted")
	}
	if _, err := st.SaveRows(3, 5); err == nil {
		t.Fatal("rows beyond the capacity accepted")
	}
	rows.Release()
	if err := st.Load(rows); err == nil {
		t.Fatal("a released block was loaded")
	}
	if _, err := b.NewState(specs, 0); err == nil {
		t.Fatal("zero capacity accepted")
	}

	// A bf16 KV cache: rows are blocks of half the bytes, copied the same way.
	half, err := b.NewState([]exec.StateSpec{{Name: "kv", Type: graph.TensorType(graph.BF16, graph.N, graph.D(2))}}, 4)
	if err != nil {
		t.Fatal(err)
	}
	hs := half.(*state)
	for i := range hs.bufs["kv"].Data {
		hs.bufs["kv"].Data[i] = byte(i + 1)
	}
	hrows, err := half.SaveRows(2, 4)
	if err != nil || hrows.Bytes() != 2*2*2 {
		t.Fatalf("bf16 rows block %v bytes, err %v", hrows.Bytes(), err)
	}
	half.Zero()
	if err := half.Load(hrows); err != nil {
		t.Fatal(err)
	}
	if got := hs.bufs["kv"].Data; got[7] != 0 || got[8] != 9 || got[15] != 16 {
		t.Fatalf("bf16 kv after loading rows 2..4: %v", got)
	}
}
