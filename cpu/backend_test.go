package cpu

import (
	"testing"

	"pistil/exec"
	"pistil/graph"
	"pistil/ops"
)

// TestCoverage: the CPU backend runs every compute op of the table through its
// reference, so an op added without one is caught here rather than at the first plan
// that uses it.
func TestCoverage(t *testing.T) {
	for _, name := range ops.Default.Names() {
		info, _ := ops.Default.Info(name)
		if info.Has(graph.Source) || info.Has(graph.View) {
			continue
		}
		if info.Ref == nil {
			t.Errorf("op %s has no reference: the CPU backend cannot run it", name)
		}
	}
}

func TestStateExportImport(t *testing.T) {
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
	snap, err := st.Export(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap["kv"]) != 2*2*4 || len(snap["rec"]) != 3*4 {
		t.Fatalf("export sizes kv %d rec %d: want only the first 2 KV rows and the whole recurrent state", len(snap["kv"]), len(snap["rec"]))
	}
	st.Zero()
	if err := st.Import(snap); err != nil {
		t.Fatal(err)
	}
	if got := s.bufs["kv"].F32(); got[3] != 4 || got[4] != 0 {
		t.Fatalf("kv after import: %v", got)
	}
	if got := s.bufs["rec"].F32(); got[2] != 9 {
		t.Fatalf("rec after import: %v", got)
	}
	delete(snap, "rec")
	if err := st.Import(snap); err == nil {
		t.Fatal("a snapshot missing a state was accepted")
	}
	if _, err := b.NewState(specs, 0); err == nil {
		t.Fatal("zero capacity accepted")
	}
}
