//go:build linux

package cuda

import (
	"context"
	"testing"

	"pistil/exec"
	"pistil/internal/fixtures"
)

// Close frees device memory: opening the golden tiny model, running a session and closing
// both 20 times leaves the device's free memory (cuMemGetInfo) where one cycle left it.
// Without Close every cycle would keep its weights, state, plan arenas and graphs (tens of
// MB each). Skips without a GPU.
func TestOpenCloseDoesNotGrowDeviceMemory(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	const cycles, capacity = 20, 4096
	ctx := context.Background()
	var footprint int64
	cycle := func() {
		m, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cuda", Chunk: 32, Graphs: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(capacity)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Generate(ctx, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, exec.GenerateOptions{MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
		footprint = m.StateBytes(capacity)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	free := func() int64 {
		g, err := openDevice()
		if err != nil {
			t.Fatal(err)
		}
		var f, total uint64
		if err := g.do(func() error { return g.d.check("cuMemGetInfo", g.d.cuMemGetInfo(&f, &total)) }); err != nil {
			t.Fatal(err)
		}
		return int64(f)
	}
	cycle()
	free0 := free()
	for range cycles - 1 {
		cycle()
	}
	free1 := free()
	t.Logf("one session's state %d bytes; device free %d -> %d bytes after %d cycles", footprint, free0, free1, cycles)
	// The driver allocates in pages and may keep a little for itself: allow one state's
	// worth (or 8 MiB) of difference, far below what 19 leaked cycles would hold.
	if slack := max(footprint, 8<<20); free0-free1 > slack {
		t.Errorf("device free memory shrank %d bytes over %d open/close cycles (allowed %d)", free0-free1, cycles-1, slack)
	}
}

// snapshotOfTwoBlocks prefills 300 tokens (two KV blocks) into a session of m, takes a
// snapshot, decodes one more token, and returns the snapshot and the logits after that
// token: what a session restored from the snapshot must give for the same token.
func snapshotOfTwoBlocks(t *testing.T, m *exec.Model) (*exec.Snapshot, []float32) {
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(1 + i%200)
	}
	a, err := m.NewSession(512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.Prefill(t.Context(), prompt, exec.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(snap.Release)
	if err := a.Decode(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	return snap, append([]float32(nil), a.Logits()...)
}

// Snapshots on the device: a snapshot's KV blocks and recurrent state, restored into
// another session after it ran something else, give the logits the first session had.
// Skips without a GPU.
func TestSnapshotRestoreOnDevice(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	m, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cuda", Chunk: 32, Graphs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	snap, want := snapshotOfTwoBlocks(t, m)
	shared := make([]int32, 100) // the first 100 of the snapshot's 300 tokens
	for i := range shared {
		shared[i] = int32(1 + i%200)
	}
	restoreGives(t, m, snap, want, shared, "restored session")
}

// restoreGives restores snap into a new session of m that first ran the tokens ran,
// decodes the token snapshotOfTwoBlocks decoded, and checks the logits equal want.
func restoreGives(t *testing.T, m *exec.Model, snap *exec.Snapshot, want []float32, ran []int32, what string) {
	b, err := m.NewSession(512)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Prefill(t.Context(), ran, exec.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if err := b.Decode(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	for i, v := range b.Logits() {
		if v != want[i] {
			t.Fatalf("%s: logit %d = %v, the original's %v", what, i, v, want[i])
		}
	}
}
