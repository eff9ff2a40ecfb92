//go:build linux

package cuda

import (
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/ops"
	"pistil/plan"
)

// Every op of the table has a CUDA lowering or a stated reason why it has none.
func TestEveryOpIsCovered(t *testing.T) {
	for _, name := range ops.Default.Names() {
		_, single := lowerings[name]
		_, composite := composites[name]
		lowered := single || composite
		reason, listed := unsupported[name]
		switch {
		case lowered && listed:
			t.Errorf("op %s has a lowering and is also listed as unsupported", name)
		case !lowered && !listed:
			t.Errorf("op %s has neither a CUDA lowering nor an entry in unsupported", name)
		case listed && reason == "":
			t.Errorf("op %s is unsupported without a reason", name)
		}
	}
	for name := range lowerings {
		if _, ok := ops.Default.Info(name); !ok {
			t.Errorf("lowering for %s, which is not an op of the table", name)
		}
	}
	for name := range composites {
		if _, ok := ops.Default.Info(name); !ok {
			t.Errorf("composite lowering for %s, which is not an op of the table", name)
		}
		if _, ok := lowerings[name]; ok {
			t.Errorf("op %s has both a single and a composite lowering", name)
		}
	}
}

// A plan with an op the backend does not know (a fused op added to the table after
// this backend) is refused before the device is touched, naming every such op once and
// the pass switch that avoids it.
func TestLoadRefusesOpsWithoutKernels(t *testing.T) {
	p := &plan.Plan{Phase: "decode", Dispatches: []plan.Dispatch{{Op: "embed"}, {Op: "future_fused"}, {Op: "other_fused"}, {Op: "future_fused"}}}
	err := checkOps(p)
	if err == nil {
		t.Fatal("a plan with unknown ops was accepted")
	}
	for _, want := range []string{"future_fused", "other_fused", "-pass=NAME/off", "pistil compile -pass=help"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Count(err.Error(), "future_fused") != 1 {
		t.Errorf("error %q repeats an op", err)
	}
	if err := checkOps(&plan.Plan{Dispatches: []plan.Dispatch{{Op: "qmatmul"}, {Op: "attention"}, {Op: "matmul_swiglu"}}}); err != nil {
		t.Errorf("a plan of supported ops was refused: %v", err)
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

// broadcast strides follow the elementwise ops' rule (b a suffix of a, or dims of 1).
func TestBroadcastStrides(t *testing.T) {
	shape, strides, err := broadcast([]int{2, 3, 4}, []int{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if shape != [4]int32{1, 2, 3, 4} || strides != [4]int32{0, 0, 1, 0} {
		t.Errorf("shape %v strides %v", shape, strides)
	}
	_, strides, _ = broadcast([]int{5, 4}, []int{4})
	if strides != [4]int32{0, 0, 0, 1} {
		t.Errorf("suffix strides %v", strides)
	}
	if _, _, err := broadcast([]int{5, 4}, []int{3}); err == nil {
		t.Error("b [3] was accepted against a [5,4]")
	}
}
