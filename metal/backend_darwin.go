//go:build darwin

package metal

import (
	"errors"
	"fmt"

	"pistil/exec"
	"pistil/ops"
	"pistil/plan"
)

// ErrNoLowering is what Load answers until the shared GPU lowering (kernel choice, grids
// and args per dispatch, for kernels.Metal's tuning) implements the encoder's Lowering.
var ErrNoLowering = errors.New("the Metal backend cannot run plans yet: the per-dispatch lowering (shared with CUDA) is not wired to it; `pistil selftest metal` checks the device, the kernels' compilation and the encoder")

func init() {
	exec.RegisterBackend("metal", func(exec.BackendOptions) (exec.Backend, error) {
		d, err := openDevice()
		if err != nil {
			return nil, err
		}
		if err := d.thread.do(d.buildPipelines); err != nil {
			return nil, err
		}
		return &Backend{dev: d}, nil
	})
}

// Backend is the Metal backend on the system default device.
type Backend struct{ dev *device }

// Name implements exec.Backend.
func (b *Backend) Name() string { return "metal" }

// Device describes the GPU and its families.
func (b *Backend) Device() string {
	return fmt.Sprintf("%s (%v)", b.dev.info.Name, b.dev.info.Families)
}

// Load implements exec.Backend; it refuses every plan until the lowering exists.
func (b *Backend) Load(p *plan.Plan, _ func(string) (*ops.Tensor, error)) (exec.Program, error) {
	return nil, fmt.Errorf("plan %s: %w", p.Phase, ErrNoLowering)
}

// NewState implements exec.Backend.
func (b *Backend) NewState([]exec.StateSpec, int) (exec.State, error) { return nil, ErrNoLowering }
