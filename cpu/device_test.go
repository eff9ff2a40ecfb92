package cpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/ops"
)

// TestProcessorName: the first "model name" line of a cpuinfo file, with its family and
// model where given, and nothing from a file without one or no file.
func TestProcessorName(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, text, want string }{
		{"cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: other\n", "AMD EPYC 9R14 (family 25 model 17)"},
		{"arm", "processor\t: 0\nmodel name\t: ARMv8 Processor rev 0 (v8l)\n", "ARMv8 Processor rev 0 (v8l)"},
		{"none", "processor\t: 0\n", ""},
		{"missing", "", ""}, // no file written
	} {
		path := filepath.Join(dir, c.file)
		if c.text != "" {
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := processorName(path); got != c.want {
			t.Errorf("processorName of %s = %q, want %q", c.file, got, c.want)
		}
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
