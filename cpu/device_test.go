package cpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/ops"
)

// TestProcessorName: the first "model name" line of a cpuinfo file, and nothing from a
// file without one or no file.
func TestProcessorName(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "cpuinfo")
	text := "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: other\n"
	if err := os.WriteFile(info, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := processorName(info), "AMD EPYC 9R14 (family 25 model 17)"; got != want {
		t.Errorf("processorName = %q, want %q", got, want)
	}
	arm := filepath.Join(dir, "arm")
	if err := os.WriteFile(arm, []byte("processor\t: 0\nmodel name\t: ARMv8 Processor rev 0 (v8l)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := processorName(arm), "ARMv8 Processor rev 0 (v8l)"; got != want {
		t.Errorf("processorName without a family = %q, want %q", got, want)
	}
	none := filepath.Join(dir, "none")
	if err := os.WriteFile(none, []byte("processor\t: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := processorName(none); got != "" {
		t.Errorf("processorName without a model name = %q", got)
	}
	if got := processorName(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("processorName of a missing file = %q", got)
	}
}

// TestDeviceNamesTheKernels: the bench's device line names the activations, the int8
// kernel where int8 activations run, and the attention kernel set in force.
func TestDeviceNamesTheKernels(t *testing.T) {
	for _, c := range []struct {
		b    Backend
		want []string
		not  string
	}{
		{Backend{}, []string{"kernels fast", "activations f32", "attention kernel " + ops.AttentionKernel()}, "int8 kernel"},
		{Backend{Activations: "int16"}, []string{"activations int16"}, "int8 kernel"},
		{Backend{Activations: "int8-all", Kernels: "reference"}, []string{"kernels reference", "activations int8-all (int8 kernel " + ops.Int8KernelName() + ")"}, ""},
	} {
		got := c.b.Device()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%+v: Device() = %q, want it to name %q", c.b, got, w)
			}
		}
		if c.not != "" && strings.Contains(got, c.not) {
			t.Errorf("%+v: Device() = %q names %q", c.b, got, c.not)
		}
	}
	if name := processorName("/proc/cpuinfo"); name != "" && !strings.HasPrefix((&Backend{}).Device(), name+"; ") {
		t.Errorf("Device() = %q, want it to start with the processor %q", (&Backend{}).Device(), name)
	}
}
