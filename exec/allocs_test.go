package exec_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"

	"pistil/exec"
)

// A decode step's allocations stay few (the CPU program keeps each dispatch's operand
// tensors; scratch tensors, prepared activations and quantized expert inputs come from
// pools): fewer than 16 per dispatch of the decode plan on the golden fixture, with float32,
// int16 and int8 activations. Session 21 measured 12.9 and 10.1 a dispatch here, 30.8 and
// 29.6 before (cpu/README.md); what is left is mostly the worker pool's jobs, the parallel
// loops' closures and the routed experts' per-call tables.
func TestDecodeStepAllocationsAreFew(t *testing.T) {
	for _, acts := range []string{"", "int16", "int8-all"} {
		t.Run("activations="+acts, func(t *testing.T) {
			m, _ := openTiny(t, "mlx-q4", exec.Options{Activations: acts, WorkerPool: true})
			p, err := m.Plan(1)
			if err != nil {
				t.Fatal(err)
			}
			s, err := m.NewSession(128)
			if err != nil {
				t.Fatal(err)
			}
			// No collection while it counts: one empties the pools, whose refilling would
			// be counted as the step's.
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			ctx := context.Background()
			if _, err := s.Generate(ctx, []int32{1, 2, 3}, exec.GenerateOptions{MaxTokens: 8}); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := s.Generate(ctx, nil, exec.GenerateOptions{MaxTokens: 33})
			if err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			perStep := float64(after.Mallocs-before.Mallocs) / float64(res.DecodeSteps)
			t.Logf("%d dispatches a step, %.0f allocations a step", len(p.Dispatches), perStep)
			if perStep >= 16*float64(len(p.Dispatches)) {
				t.Errorf("a decode step allocates %.0f times, want fewer than 16 per dispatch (%d dispatches)", perStep, len(p.Dispatches))
			}
		})
	}
}
