package metal

import (
	"bytes"
	"fmt"
	"unsafe"

	"pistil/gpu"
	"pistil/graph"
	"pistil/plan"
)

// GPULowering is the encoder's Lowering through the shared GPU lowering (package gpu,
// target gpu.Metal): the kernel, grid, group size and args of each dispatch are the ones
// the plan's select-kernels pass recorded, and Lower refuses a dispatch whose lowering
// disagrees with the plan. Shapes are evaluated at the plan's T and the session's
// context capacity N.
type GPULowering struct {
	Target *gpu.Target
	Bind   graph.Bindings
}

// Lower implements Lowering.
func (l GPULowering) Lower(d *plan.Dispatch, args, results []Operand, steps uint64) ([][]Launch, error) {
	conv := func(ops []Operand) []gpu.Operand {
		out := make([]gpu.Operand, len(ops))
		for i, o := range ops {
			out[i] = gpu.Operand{Addr: o.Addr, W: o.W, DType: o.Operand.Type.DType, Shape: o.Operand.Type.Shape.Eval(l.Bind)}
		}
		return out
	}
	ln, err := l.Target.Lower(d, conv(args), conv(results), steps)
	if err != nil {
		return nil, err
	}
	if d.Kernel != "" && (ln.Kernel != d.Kernel || ln.Grid != d.Grid || ln.Block != d.Block) {
		return nil, fmt.Errorf("the lowering launches %s grid %v x %d, the plan says %s grid %v x %d (compiled for another target?)",
			ln.Kernel, ln.Grid, ln.Block, d.Kernel, d.Grid, d.Block)
	}
	b := bytes.Clone(unsafe.Slice((*byte)(ln.ArgsPointer()), ln.ArgsSize()))
	return [][]Launch{{{Kernel: ln.Kernel, Grid: ln.Grid, Threads: ln.Block, Args: b}}}, nil
}
