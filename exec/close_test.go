package exec_test

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"pistil/exec"
)

// Close frees a model's and a session's memory even while their values are still
// referenced (a server keeps its handles until shutdown): opening and closing a model and
// a session 20 times, keeping every handle, leaves the live heap where one cycle left it.
// A no-op Close keeps 19 more states and plan arenas alive and fails the bound.
func TestOpenCloseDoesNotGrowHostMemory(t *testing.T) {
	const cycles, capacity = 20, 4096
	ctx := context.Background()
	type handles struct {
		m *exec.Model
		s *exec.Session
	}
	var kept []handles
	var footprint int64
	cycle := func() {
		m, err := exec.Open(goldenDir+"mlx-q4", exec.Options{Chunk: 32})
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(capacity)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Generate(ctx, []int32{1, 2, 3, 4, 5}, exec.GenerateOptions{MaxTokens: 3}); err != nil {
			t.Fatal(err)
		}
		footprint = m.StateBytes(capacity)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, handles{m, s})
	}
	cycle()
	heap0, rss0 := liveMemory()
	for range cycles - 1 {
		cycle()
	}
	heap1, rss1 := liveMemory()
	t.Logf("one session's state %d bytes; live heap %d -> %d, RSS %d -> %d after %d cycles", footprint, heap0, heap1, rss0, rss1, cycles)
	if footprint < 1<<20 {
		t.Fatalf("a session of %d tokens holds only %d bytes: too small to tell a leak from noise", capacity, footprint)
	}
	if growth := int64(heap1) - int64(heap0); growth > footprint {
		t.Errorf("live heap grew %d bytes over %d open/close cycles (one session's state is %d)", growth, cycles-1, footprint)
	}
	if rss0 > 0 && int64(rss1)-int64(rss0) > 4*footprint {
		t.Errorf("RSS grew %d bytes over %d open/close cycles (one session's state is %d)", rss1-rss0, cycles-1, footprint)
	}

	// What is closed refuses work with an error, and closing again is harmless.
	last := kept[len(kept)-1]
	if err := last.s.Prefill(ctx, []int32{1}, exec.PrefillOptions{}); err == nil {
		t.Error("a closed session prefilled")
	}
	if _, err := last.s.Generate(ctx, []int32{1}, exec.GenerateOptions{MaxTokens: 1}); err == nil {
		t.Error("a closed session generated")
	}
	if _, err := last.m.NewSession(8); err == nil {
		t.Error("a closed model made a session")
	}
	if err := last.s.Close(); err != nil {
		t.Errorf("second session Close: %v", err)
	}
	if err := last.m.Close(); err != nil {
		t.Errorf("second model Close: %v", err)
	}
	runtime.KeepAlive(kept)
}

// A session of a model closed under it cannot run: its programs are gone.
func TestSessionOfClosedModelFails(t *testing.T) {
	m, err := exec.Open(goldenDir+"mlx-q4", exec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(16)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m.Close()
	if err := s.Prefill(context.Background(), []int32{1, 2, 3}, exec.PrefillOptions{}); err == nil {
		t.Fatal("a session of a closed model prefilled")
	}
}

// liveMemory is the live heap after a full collection, and the resident set size where
// the system reports it (0 elsewhere).
func liveMemory() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if data, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			rss = pages * uint64(os.Getpagesize())
		}
	}
	return ms.HeapAlloc, rss
}
