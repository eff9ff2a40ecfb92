package main

import (
	"bytes"
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
