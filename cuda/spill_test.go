//go:build linux

package cuda

import (
	"testing"

	"pistil/exec"
	"pistil/graph"
	"pistil/internal/fixtures"
)

// Spilling to host memory: a snapshot's recurrent state and KV blocks, spilled, free
// their device memory (cuMemGetInfo), and restoring the snapshot into another session
// uploads them and gives exactly the logits the first session had; with a float32 and
// with a bf16 KV cache (whose blocks hold half the bytes). Skips without a GPU (or
// cuda/emu).
func TestSnapshotSpillToHost(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	var kvRow int64
	for _, kv := range []graph.DType{graph.F32, graph.BF16} {
		t.Run(kv.String(), func(t *testing.T) {
			m, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cuda", Chunk: 32, Graphs: true, KVCache: kv})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if kv == graph.F32 {
				kvRow = m.KVBytesPerToken()
			} else if 2*m.KVBytesPerToken() != kvRow {
				t.Errorf("bf16 KV cache: %d bytes per token, float32 %d", m.KVBytesPerToken(), kvRow)
			}
			spillAndRestore(t, m)
		})
	}
}

func spillAndRestore(t *testing.T, m *exec.Model) {
	if !m.StateInDeviceMemory() {
		t.Fatal("the CUDA backend's state is not reported as device memory")
	}
	snap, want := snapshotOfTwoBlocks(t, m)

	g, err := openDevice()
	if err != nil {
		t.Fatal(err)
	}
	free := func() int64 {
		var f, total uint64
		if err := g.do(func() error { return g.d.check("cuMemGetInfo", g.d.cuMemGetInfo(&f, &total)) }); err != nil {
			t.Fatal(err)
		}
		return int64(f)
	}
	spilled := snap.FixedBytes()
	before, liveBefore := free(), g.liveBytes()
	if !snap.OnDevice() {
		t.Fatal("a fresh snapshot is not in device memory")
	}
	if err := snap.Spill(); err != nil {
		t.Fatal(err)
	}
	for _, b := range snap.KV() {
		if !b.OnDevice() {
			t.Fatalf("KV block [%d, %d) is not in device memory before it spilled", b.Start, b.End)
		}
		if err := b.Spill(); err != nil {
			t.Fatal(err)
		}
		if want := int64(b.End-b.Start) * m.KVBytesPerToken(); b.Bytes() != want {
			t.Errorf("KV block [%d, %d) holds %d bytes, want %d", b.Start, b.End, b.Bytes(), want)
		}
		spilled += b.Bytes()
	}
	if snap.OnDevice() || snap.KV()[0].OnDevice() || snap.KV()[1].OnDevice() {
		t.Fatal("spilled blocks still report device memory")
	}
	if err := snap.Spill(); err != nil { // twice: nothing to do
		t.Fatal(err)
	}
	after, liveAfter := free(), g.liveBytes()
	// The backend's own count is exact; the driver's free memory moves in pages (on an
	// H200 it did not move at all for these 0.5 MB), so it is only logged.
	t.Logf("spilled %d bytes; device memory held %d -> %d bytes; driver's free %d -> %d", spilled, liveBefore, liveAfter, before, after)
	if liveBefore-liveAfter < spilled {
		t.Errorf("spilling %d bytes gave back %d bytes of device memory", spilled, liveBefore-liveAfter)
	}

	// Another session that ran something else, so no KV row it holds is the snapshot's.
	other := make([]int32, 400)
	for i := range other {
		other[i] = int32(3 + i%150)
	}
	restoreGives(t, m, snap, want, other, "the session restored from spilled blocks")
}
