//go:build !darwin

package metal

import (
	"errors"

	"pistil/exec"
)

// ErrUnavailable is what asking for the backend answers away from a Mac.
var ErrUnavailable = errors.New("Metal is available only on macOS on Apple silicon")

// On other systems the backend registers so that --backend metal gets a clear answer
// instead of "unknown backend".
func init() {
	exec.RegisterBackend("metal", func(exec.BackendOptions) (exec.Backend, error) { return nil, ErrUnavailable })
}
