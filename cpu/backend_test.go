package cpu

import (
	"strings"
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

// The int8 kernel comes from the backend's options (pipeline.toml's [cpu] int8_kernel),
// PISTIL_CPU_INT8_KERNEL overriding them, and a name the machine lacks is refused with the
// setting that named it.
func TestInt8KernelFromOptions(t *testing.T) {
	saved := ops.Int8KernelName()
	t.Cleanup(func() {
		if saved != "" {
			ops.SetInt8Kernel(saved)
		}
	})
	t.Setenv(Int8KernelEnv, "")
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{Int8Kernel: "go"}); err != nil || ops.Int8KernelName() != "go" {
		t.Fatalf("int8_kernel go: %v, kernel %q", err, ops.Int8KernelName())
	}
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{Int8Kernel: "int4"}); err == nil || !strings.Contains(err.Error(), "cpu.int8_kernel") || !strings.Contains(err.Error(), "int4") {
		t.Errorf("int8_kernel int4: %v", err)
	}
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{}); err != nil || ops.Int8KernelName() != ops.FastestInt8Kernel() {
		t.Errorf("int8_kernel unset after go: %v, kernel %q, want the fastest %q", err, ops.Int8KernelName(), ops.FastestInt8Kernel())
	}
	t.Setenv(Int8KernelEnv, "go")
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{Int8Kernel: "int4"}); err != nil || ops.Int8KernelName() != "go" {
		t.Errorf("%s=go over int8_kernel int4: %v, kernel %q", Int8KernelEnv, err, ops.Int8KernelName())
	}
}
