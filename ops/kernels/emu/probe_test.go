package emu

import (
	"encoding/binary"
	"sync"
	"testing"

	"pistil/ops/kernels"
)

var (
	buildOnce sync.Once
	built     *Machine
	buildErr  error
)

// machine is the emulator of the real Metal source, built once per test binary; it
// skips the test when clang++ is absent.
func machine(t *testing.T) *Machine {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	buildOnce.Do(func() { built, buildErr = Build(kernels.MetalSource()) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// The emulated MSL lays out every args struct as Go does (the probe kernel reports
// offsetof and sizeof of each field).
func TestProbeLayout(t *testing.T) {
	m := machine(t)
	layouts := kernels.Layouts()
	var mem Memory
	out := mem.Alloc(8*len(layouts), 0xff)
	if err := m.Run(&mem, []Launch{{Kernel: kernels.KernelProbeLayout, Grid: [3]int{1, 1, 1}, Threads: 32, Args: struct{ Out uint64 }{out}}}, Options{}); err != nil {
		t.Fatal(err)
	}
	got := mem.Bytes(out, 8*len(layouts))
	for i, l := range layouts {
		if v := binary.LittleEndian.Uint64(got[8*i:]); uintptr(v) != l.Offset {
			t.Errorf("%s.%s: emulated MSL says %d, Go %d", l.Struct, l.Field, v, l.Offset)
		}
	}
}
