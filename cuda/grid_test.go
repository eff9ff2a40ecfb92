//go:build linux

package cuda

import (
	"context"
	"os"
	"strings"
	"testing"

	_ "pistil/cpu" // the reference backend
	"pistil/verify/grid"
)

// gridTolerance bounds the CUDA backend against the CPU backend: both accumulate in
// float32 in different orders (and the GPU's expf/powf differ in the last ulps), so the
// bound is a few thousandths of a logit plus 2e-4 of the position's largest logit.
var gridTolerance = grid.Tolerance{Abs: 2e-3, Rel: 2e-4}

// TestGrid is the differential grid on the GPU: every shape of verify/grid.Shapes, every
// path (whole, chunks of 1, 7 and 64, decode) against the CPU backend's whole-prompt
// logits. One subtest per shape (-test.run 'TestGrid/issue10' picks some). The
// environment may set PISTIL_GRID_PIPELINE (a pipeline.toml for both sides, e.g. with
// graphs = false) and PISTIL_GRID_PASSES (comma-separated -pass switches, e.g.
// "all/off").
func TestGrid(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	o := grid.Options{Reference: "cpu", Backend: "cuda", Tolerance: gridTolerance, Seed: 1,
		PipelineFile: os.Getenv("PISTIL_GRID_PIPELINE")}
	if p := os.Getenv("PISTIL_GRID_PASSES"); p != "" {
		o.Passes = strings.Split(p, ",")
	}
	dir := t.TempDir()
	for _, s := range grid.Shapes {
		t.Run(s.ID(), func(t *testing.T) {
			ck, err := grid.Write(s, dir, o.Seed)
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(ck)
			t.Logf("dims %s", s.Dims)
			results, err := grid.Run(context.Background(), s, ck, o)
			for _, r := range results {
				t.Log(r)
				if !r.Pass() {
					t.Error(r)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
