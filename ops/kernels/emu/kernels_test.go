package emu

import (
	"testing"

	"pistil/metal/kernelcheck"
	"pistil/ops/kernels"
)

// The kernels' Metal translation, run on the emulator, against the CPU references of
// pistil/ops: the checks of metal/kernelcheck (every kernel at the tiny golden model's
// shapes; the Mac self-test runs the same checks on the GPU).

// device is a kernelcheck.Device over the emulator: fresh memory per case.
type device struct {
	m   *Machine
	mem Memory
	opt Options
}

func (d *device) Alloc(n int, fill byte) uint64   { return d.mem.Alloc(n, fill) }
func (d *device) Bytes(addr uint64, n int) []byte { return d.mem.Bytes(addr, n) }
func (d *device) Run(ls []kernelcheck.Launch) error {
	launches := make([]Launch, len(ls))
	for i, l := range ls {
		launches[i] = Launch{Kernel: l.Kernel, Grid: l.Grid, Threads: l.Threads, Args: l.Args}
	}
	return d.m.Run(&d.mem, launches, d.opt)
}

func runCase(m *Machine, c kernelcheck.Case, opt Options) error {
	return c.Run(&device{m: m, opt: opt})
}

func TestKernelsMatchReferences(t *testing.T) {
	m := machine(t)
	for _, c := range kernelcheck.Cases() {
		t.Run(c.Name(), func(t *testing.T) {
			if err := runCase(m, c, Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	covered := map[string]bool{}
	for _, k := range kernelsOfCases(t) {
		covered[k] = true
	}
	for _, k := range kernels.Names {
		if !covered[k] {
			t.Errorf("kernel %s has no emulator case", k)
		}
	}
}

// kernelsOfCases lists the kernels the cases launch.
func kernelsOfCases(t *testing.T) []string {
	var out []string
	for _, c := range kernelcheck.Cases() {
		ks, err := c.Kernels()
		if err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		out = append(out, ks...)
	}
	return out
}
