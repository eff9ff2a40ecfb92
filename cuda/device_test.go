//go:build linux

package cuda

import (
	"slices"
	"testing"
)

// PISTIL_CUDA_DEFINES becomes one -D option per space-separated definition; unset, none.
func TestTuningDefines(t *testing.T) {
	t.Setenv("PISTIL_CUDA_DEFINES", "")
	if got := tuningDefines(); len(got) != 0 {
		t.Errorf("unset: %q", got)
	}
	t.Setenv("PISTIL_CUDA_DEFINES", " MMA_XPARTS=2  FOO=1 ")
	if got, want := tuningDefines(), []string{"-DMMA_XPARTS=2", "-DFOO=1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
