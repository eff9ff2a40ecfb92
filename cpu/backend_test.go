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

// The tiled attention's kernel set comes from the backend's options (pipeline.toml's [cpu]
// attention_kernel) the same way: PISTIL_CPU_ATTENTION_KERNEL overrides them, unset means
// the fastest (undoing an earlier model's choice), and an unknown name is refused with the
// setting that named it.
func TestAttentionKernelFromOptions(t *testing.T) {
	t.Setenv(AttentionKernelEnv, "")
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{}); err != nil {
		t.Fatal(err)
	}
	fastest := ops.AttentionKernel()
	t.Cleanup(func() { ops.SetAttentionKernel("") })
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{AttentionKernel: "go"}); err != nil || ops.AttentionKernel() != "go" {
		t.Fatalf("attention_kernel go: %v, kernel %q", err, ops.AttentionKernel())
	}
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{AttentionKernel: "avx1024"}); err == nil || !strings.Contains(err.Error(), "cpu.attention_kernel") || !strings.Contains(err.Error(), "avx1024") {
		t.Errorf("attention_kernel avx1024: %v", err)
	}
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{}); err != nil || ops.AttentionKernel() != fastest {
		t.Errorf("attention_kernel unset after go: %v, kernel %q, want the fastest %q", err, ops.AttentionKernel(), fastest)
	}
	t.Setenv(AttentionKernelEnv, "go")
	if _, err := exec.NewBackend("cpu", exec.BackendOptions{AttentionKernel: "avx1024"}); err != nil || ops.AttentionKernel() != "go" {
		t.Errorf("%s=go over attention_kernel avx1024: %v, kernel %q", AttentionKernelEnv, err, ops.AttentionKernel())
	}
}
