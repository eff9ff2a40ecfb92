//go:build !linux

package cuda

import (
	"fmt"
	"runtime"

	"pistil/exec"
)

// On systems other than Linux the backend registers so that asking for it gives a clear
// error instead of "unknown backend".
func init() {
	exec.RegisterBackend("cuda", func(exec.BackendOptions) (exec.Backend, error) {
		return nil, fmt.Errorf("CUDA not available: the cuda backend runs on Linux, not %s", runtime.GOOS)
	})
}
