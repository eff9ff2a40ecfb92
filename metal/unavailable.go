//go:build !darwin

package metal

import "pistil/exec"

// On other systems the backend registers so that --backend metal gets a clear answer
// instead of "unknown backend".
func init() {
	exec.RegisterBackend("metal", func(exec.BackendOptions) (exec.Backend, error) { return nil, ErrUnavailable })
}
