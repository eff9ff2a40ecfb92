package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"pistil/ops/kernels"
)

func TestKernelsPrintsEachBackendsSource(t *testing.T) {
	for backend, want := range map[string]string{"metal": kernels.MetalSource(), "cuda": kernels.CUDASource()} {
		var out bytes.Buffer
		if err := kernelsTo(&out, []string{"--backend", backend}); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("--backend %s: printed %d bytes, not the %d of the source the backend compiles", backend, out.Len(), len(want))
		}
	}
	var out bytes.Buffer
	if err := kernelsTo(&out, []string{"--backend", "vulkan"}); err == nil || !strings.Contains(err.Error(), "vulkan") {
		t.Errorf("--backend vulkan: %v, want an error naming it", err)
	}
	if err := kernelsTo(&out, []string{"extra"}); err == nil {
		t.Error("a stray argument gave no error")
	}
}

// --tuning lists the CUDA kernels' tuning macros as NAME=DEFAULT lines, each of which
// [cuda] kernel_defines accepts as it is.
func TestKernelsListsTheTuningMacros(t *testing.T) {
	var out bytes.Buffer
	if err := kernelsTo(&out, []string{"--tuning"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(kernels.TuningMacros()) {
		t.Errorf("%d lines for %d tuning macros:\n%s", len(lines), len(kernels.TuningMacros()), out.String())
	}
	for _, want := range []string{"MMA_UNGUARDED=1", "MMA_PARTIAL_SUBTILES=1", "AM_MAX_KEY_TILES=2"} {
		if !strings.Contains("\n"+out.String(), "\n"+want+"\n") {
			t.Errorf("--tuning lacks the line %s:\n%s", want, out.String())
		}
	}
	for _, l := range lines {
		if _, _, err := kernels.ParseTuningDefine(l); err != nil {
			t.Errorf("--tuning line %q is not a kernel define: %v", l, err)
		}
	}
}

// Away from a Mac, the self-test says why it cannot run; a wrong backend is a usage error.
func TestSelftestAnswersOffMac(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("on a Mac the self-test runs for real")
	}
	var out bytes.Buffer
	if err := selftestTo(&out, []string{"metal"}); err == nil || err.Error() != "Metal is available only on macOS on Apple silicon" {
		t.Errorf("selftest metal: %v", err)
	}
	if err := selftestTo(&out, []string{"cuda"}); err == nil || !strings.Contains(err.Error(), "selftest metal") {
		t.Errorf("selftest cuda: %v", err)
	}
}
