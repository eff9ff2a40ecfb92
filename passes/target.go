package passes

import (
	"fmt"
	"sort"
	"strings"

	"pistil/gpu"
	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// DefaultCostContext is the context length a plan's reported costs assume when the
// caller names none (attention's KV reads grow with it; what runs does not).
const DefaultCostContext = 4096

// Target is the backend a plan is compiled for. It is the one place that says what
// differs between backends' plans: the state types a session holds and, for a GPU,
// which dispatches run as one kernel and which kernel, grid and group size each is.
type Target struct {
	Name string
	// KVDType is the KV caches' element type, ConvStateDType the conv state's. The
	// Gated DeltaNet recurrent state is float32 on every backend.
	KVDType, ConvStateDType graph.DType
	// GPU, for a GPU backend, is its kernel lowering; nil for the CPU, whose op
	// references run every op of the table.
	GPU *gpu.Target
}

// Every backend's state is float32 today: the CPU's so that it matches the float32
// references to rounding, the GPUs' because that is what their kernels are checked
// against (a bf16 KV cache is a planned option, with its effect measured by pistil check).
var targets = map[string]*Target{
	"cpu":   {Name: "cpu", KVDType: graph.F32, ConvStateDType: graph.F32},
	"cuda":  {Name: "cuda", KVDType: graph.F32, ConvStateDType: graph.F32, GPU: gpu.CUDA},
	"metal": {Name: "metal", KVDType: graph.F32, ConvStateDType: graph.F32, GPU: gpu.Metal},
}

// TargetFor returns the named backend's target ("" is the CPU).
func TargetFor(name string) (*Target, error) {
	if name == "" {
		name = "cpu"
	}
	t, ok := targets[name]
	if !ok {
		return nil, fmt.Errorf("no compile target %q (targets: %s)", name, strings.Join(TargetNames(), ", "))
	}
	return t, nil
}

// TargetNames lists the targets, sorted.
func TargetNames() []string {
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// nominalBase is where buffer i is assumed to start when the compiler asks the GPU
// lowering about a dispatch: far apart, and aligned as device allocations are (256
// bytes), so alignment checks see what the device will see.
func nominalBase(buffer int) uint64 { return uint64(buffer+1) << 40 }

// nominalOperand describes a value of type t at byte offset off of buffer to the GPU
// lowering, as the device will hold it, without data.
func nominalOperand(t graph.Type, bind graph.Bindings, buffer int, off int64) gpu.Operand {
	addr := nominalBase(buffer) + uint64(off)
	code, _ := gpu.DTypeCode(t.DType)
	return gpu.Operand{Addr: addr, DType: t.DType, Shape: t.Shape.Eval(bind),
		W: kernels.Weight{Data: addr, Scales: addr, Biases: addr, DType: code, Group: int32(t.Group)}}
}

// argOperands describes values to the GPU lowering as a dispatch's args before memory
// is planned: types only, at aligned addresses (the arena keeps every placement aligned).
func argOperands(args []*graph.Value, bind graph.Bindings) []gpu.Operand {
	in := make([]gpu.Operand, len(args))
	for i, a := range args {
		in[i] = nominalOperand(a.Type, bind, 0, 0)
	}
	return in
}

// valueOperands describes v's args and results to the GPU lowering before memory is
// planned: types only, at aligned addresses (the arena keeps every placement aligned).
func valueOperands(v *graph.Value, bind graph.Bindings) (in, out []gpu.Operand) {
	in = argOperands(v.Args, bind)
	elems := v.Type.Elems
	if len(elems) == 0 {
		elems = []graph.Type{v.Type}
	}
	for _, t := range elems {
		out = append(out, nominalOperand(t, bind, 1, 0))
	}
	return in, out
}

// dispatchOperands describes a planned dispatch's args and results to the GPU lowering,
// at their planned buffers and offsets.
func dispatchOperands(p *plan.Plan, d *plan.Dispatch) (in, out []gpu.Operand) {
	bind := graph.Bindings{T: p.Tokens, N: max(p.Context+p.Tokens, 1)}
	place := func(o plan.Operand) gpu.Operand { return nominalOperand(o.Type, bind, o.Buffer, o.Offset) }
	in = make([]gpu.Operand, len(d.Args))
	for j, a := range d.Args {
		in[j] = place(a)
	}
	out = make([]gpu.Operand, len(d.Results))
	for j, r := range d.Results {
		out[j] = place(r)
	}
	return in, out
}

// selectKernels records, for a GPU target, the kernel, grid and group size of every
// dispatch: the GPU lowering's own choice for the planned operands, which the backend
// repeats at load time and checks against the plan.
func selectKernels(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil {
		return err
	}
	p := u.Plan
	if p == nil {
		return fmt.Errorf("select-kernels needs lower to have run")
	}
	p.Backend = t.Name
	p.Passes = append(p.Passes, "select-kernels")
	if t.GPU == nil {
		return nil
	}
	for i := range p.Dispatches {
		d := &p.Dispatches[i]
		in, out := dispatchOperands(p, d)
		l, err := t.GPU.Lower(d, in, out, nominalBase(len(p.Buffers)))
		if err != nil {
			return fmt.Errorf("dispatch %d (%s, %s) on %s: %w", d.Index, d.Op, d.Label, t.Name, err)
		}
		d.Kernel, d.Grid, d.Block = l.Kernel, l.Grid, l.Block
	}
	return nil
}
