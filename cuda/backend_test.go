//go:build linux

package cuda

import (
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/plan"
)

// A plan that was not compiled for CUDA (no kernel named per dispatch) is refused before
// the device is touched, saying how to compile one.
func TestLoadRefusesPlansOfOtherTargets(t *testing.T) {
	for _, p := range []*plan.Plan{
		{Phase: "decode", Backend: "cpu", Dispatches: []plan.Dispatch{{Op: "embed"}}},
		{Phase: "decode", Dispatches: []plan.Dispatch{{Op: "embed"}}},
	} {
		err := checkOps(p)
		if err == nil || !strings.Contains(err.Error(), "--backend cuda") {
			t.Errorf("plan for %q: error %v, want a refusal that says --backend cuda", p.Backend, err)
		}
	}
	err := checkOps(&plan.Plan{Phase: "decode", Backend: "cuda", Dispatches: []plan.Dispatch{{Op: "embed", Kernel: "embed"}, {Index: 1, Op: "rope"}}})
	if err == nil || !strings.Contains(err.Error(), "dispatch 1 (rope) names no kernel") {
		t.Errorf("a cuda plan with a dispatch lacking its kernel: error %v", err)
	}
	if err := checkOps(&plan.Plan{Backend: "cuda", Dispatches: []plan.Dispatch{{Op: "qmatmul", Kernel: "matvec_q4"}}}); err != nil {
		t.Errorf("a cuda plan was refused: %v", err)
	}
}

// Without a GPU, asking for the backend is a clean error that says CUDA is missing.
func TestOpenWithoutGPUFailsCleanly(t *testing.T) {
	if _, err := loadDriver(); err == nil {
		t.Skip("a CUDA device is present; this test is for machines without one")
	}
	_, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cuda"})
	if err == nil {
		t.Fatal("exec.Open with backend cuda succeeded without a GPU")
	}
	if !strings.Contains(err.Error(), "CUDA not available") {
		t.Errorf("error %q does not say CUDA is not available", err)
	}
}
