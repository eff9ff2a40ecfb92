//go:build linux

package cuda

import (
	"strings"
	"testing"

	"pistil/exec"
	"pistil/exec/plan"
	"pistil/ops"
)

// Every op of the table has a CUDA lowering or a stated reason why it has none.
func TestEveryOpIsCovered(t *testing.T) {
	for _, name := range ops.Default.Names() {
		_, lowered := lowerings[name]
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
	for op, pass := range passOff {
		if !strings.Contains(unsupported[op], pass) {
			t.Errorf("unsupported[%s] does not name its pass %s", op, pass)
		}
	}
}

// A plan with fused ops is refused before the device is touched, naming every op and
// the pass switches that avoid them.
func TestLoadRefusesOpsWithoutKernels(t *testing.T) {
	p := &plan.Plan{Phase: "decode", Dispatches: []plan.Dispatch{{Op: "embed"}, {Op: "matmuls"}, {Op: "matmul_swiglu"}, {Op: "expert_matmul_swiglu"}}}
	err := checkOps(p)
	if err == nil {
		t.Fatal("a plan with matmuls and matmul_swiglu was accepted")
	}
	for _, want := range []string{"matmuls", "matmul_swiglu", "expert_matmul_swiglu", "-pass=fuse-projections/off", "-pass=fuse-swiglu/off"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Count(err.Error(), "fuse-swiglu/off") != 1 {
		t.Errorf("error %q repeats a pass switch", err)
	}
	if err := checkOps(&plan.Plan{Dispatches: []plan.Dispatch{{Op: "qmatmul"}, {Op: "attention"}}}); err != nil {
		t.Errorf("a plan of supported ops was refused: %v", err)
	}
}

// Without a GPU, asking for the backend is a clean error that says CUDA is missing.
func TestOpenWithoutGPUFailsCleanly(t *testing.T) {
	if _, err := loadDriver(); err == nil {
		t.Skip("a CUDA device is present; this test is for machines without one")
	}
	_, err := exec.Open("../../shared/golden/tiny-s1/mlx-q4", exec.Options{Backend: "cuda"})
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
