// Package kernelcheck holds per-kernel checks of the GPU kernels against the op
// references of pistil/ops: an op on concrete inputs (the tiny golden model's shapes, with
// ties and bf16 stores), the launches that compute it (written here kernel by kernel, or
// gpu.Metal's own), and the comparison. A Device runs them: the CPU emulator of Metal in
// the tests on Linux (ops/kernels/emu), the GPU in the Mac self-test.
package kernelcheck

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"unsafe"

	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Device is device memory with kernels to run on it: Alloc reserves n bytes filled with
// fill (16-byte aligned at least) and returns their address, Bytes is the memory at an
// address (valid until the next Alloc or Run), Run executes launches in order.
type Device interface {
	Alloc(n int, fill byte) uint64
	Bytes(addr uint64, n int) []byte
	Run(launches []Launch) error
}

// Launch is one kernel launch: kernel, grid of groups, threads per group, and the args
// struct (a kernels.*Args value, or its bytes).
type Launch struct {
	Kernel  string
	Grid    [3]int
	Threads int
	Args    any
}

// ArgBytes is a launch's args as bytes (Go's layout, which the kernels' C layout is
// tested to equal).
func ArgBytes(a any) []byte {
	if b, ok := a.([]byte); ok {
		return b
	}
	v := reflect.ValueOf(a)
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return bytes.Clone(unsafe.Slice((*byte)(p.UnsafePointer()), v.Type().Size()))
}

// operand is an input or result placed in device memory.
type operand struct {
	addr  uint64
	w     kernels.Weight
	dtype graph.DType
	shape []int
}

// env is what a case's launch builder sees: its operands, the step-scalar buffer and
// scratch memory.
type env struct {
	in, out []operand
	steps   uint64
	mem     Device
}

func (e *env) work(bytes int) uint64 { return e.mem.Alloc(bytes, 0) }

// Case is one op on concrete inputs, computed by the op's reference and by launches of
// the kernels on a Device.
type Case struct {
	name   string
	op     string
	attrs  graph.Attrs
	in     []*ops.Tensor
	alias  map[int]int // result index -> the arg whose buffer it updates in place
	C      int         // context before the step (step buffer)
	exact  bool        // results must equal the reference bit for bit (stores, ids)
	launch func(e *env) []Launch
}

// dtypeCode is the kernels' DT_* code of dt (the shared GPU lowering's map; the cases
// only use dtypes it knows).
func dtypeCode(dt graph.DType) int32 {
	code, _ := gpu.DTypeCode(dt)
	return code
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func elementGrid(n int) [3]int { return [3]int{max(ceilDiv(n, 256), 1), 1, 1} }

func rowBlock(d int) int { return min(max(ceilDiv(d, 32)*32, 32), 256) }

// referenceOf runs the op's CPU reference on copies of the inputs.
func referenceOf(c Case) ([]graph.Type, []*ops.Tensor, error) {
	info, ok := ops.Default.Info(c.op)
	if !ok {
		return nil, nil, fmt.Errorf("op %s is not in the table", c.op)
	}
	b := graph.NewBuilder(graph.New(c.op), ops.Default)
	srcs := make([]*graph.Value, len(c.in))
	for i, in := range c.in {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), graph.Type{DType: in.DType, Shape: graph.S(in.Shape...), Group: in.Group}, nil)
	}
	v := b.Op(c.op, c.attrs, srcs...)
	if err := b.Err(); err != nil {
		return nil, nil, err
	}
	outTypes := []graph.Type{v.Type}
	if v.Type.IsTuple() {
		outTypes = v.Type.Elems
	}
	cpuIn := make([]*ops.Tensor, len(c.in))
	for i, in := range c.in {
		cp := *in
		cp.Data = append([]byte(nil), in.Data...)
		cpuIn[i] = &cp
	}
	cpuOut := make([]*ops.Tensor, len(outTypes))
	for i, ot := range outTypes {
		cpuOut[i] = ops.NewTensor(ot.DType, ot.Shape.Eval(graph.Bindings{})...)
	}
	env := &ops.Env{Bind: graph.Bindings{T: c.in[0].Shape[0], C: c.C, N: 16}, Workers: 1}
	if err := info.Ref(env, v, cpuIn, cpuOut); err != nil {
		return nil, nil, err
	}
	return outTypes, cpuOut, nil
}

// put copies b into fresh device memory and returns its address.
func put(d Device, b []byte) uint64 {
	a := d.Alloc(len(b), 0)
	copy(d.Bytes(a, len(b)), b)
	return a
}

// Name and Op say what the case computes.
func (c Case) Name() string { return c.name }
func (c Case) Op() string   { return c.op }

// Run runs the case on d and returns the first mismatch with the reference (nil when the
// kernels agree with it).
func (c Case) Run(d Device) error {
	outTypes, want, err := referenceOf(c)
	if err != nil {
		return err
	}
	mem := d
	e := &env{mem: mem}
	for _, t := range c.in {
		o := operand{dtype: t.DType, shape: t.Shape}
		o.addr = put(mem, t.Data)
		o.w = kernels.Weight{Data: o.addr, DType: dtypeCode(t.DType)}
		if t.DType.Quantized() {
			o.w.Scales, o.w.Biases, o.w.Group = put(mem, t.Scales), put(mem, t.Biases), int32(t.Group)
		}
		e.in = append(e.in, o)
	}
	for i, ot := range outTypes {
		if j, ok := c.alias[i]; ok {
			e.out = append(e.out, e.in[j])
			continue
		}
		// 0xff bytes are NaN in every float dtype: an unwritten result fails.
		a := mem.Alloc(int(ot.Bytes(graph.Bindings{})), 0xff)
		e.out = append(e.out, operand{addr: a, w: kernels.Weight{Data: a, DType: dtypeCode(ot.DType)}, dtype: ot.DType, shape: ot.Shape.Eval(graph.Bindings{})})
	}
	steps := []int32{int32(c.C), int32(c.in[0].Shape[0]), 16, 0}
	e.steps = put(mem, unsafe.Slice((*byte)(unsafe.Pointer(&steps[0])), 16))
	launches, err := launchesOf(c, e)
	if err != nil {
		return err
	}
	if err := d.Run(launches); err != nil {
		return err
	}
	for i, ot := range outTypes {
		got := &ops.Tensor{DType: ot.DType, Shape: want[i].Shape, Data: mem.Bytes(e.out[i].addr, len(want[i].Data))}
		if err := compare(want[i], got, c.exact); err != nil {
			return fmt.Errorf("result %d: %w", i, err)
		}
	}
	return nil
}

// launchesOf is a case's launches: its own, or, when it has none, the shared GPU
// lowering's for the Metal target (what the Metal backend launches for the op).
func launchesOf(c Case, e *env) ([]Launch, error) {
	if c.launch != nil {
		return c.launch(e), nil
	}
	conv := func(ops []operand) []gpu.Operand {
		out := make([]gpu.Operand, len(ops))
		for i, o := range ops {
			out[i] = gpu.Operand{Addr: o.addr, W: o.w, DType: o.dtype, Shape: o.shape}
		}
		return out
	}
	l, err := gpu.Metal.Lower(&plan.Dispatch{Op: c.op, Attrs: c.attrs}, conv(e.in), conv(e.out), e.steps)
	if err != nil {
		return nil, err
	}
	return []Launch{{Kernel: l.Kernel, Grid: l.Grid, Threads: l.Block,
		Args: bytes.Clone(unsafe.Slice((*byte)(l.ArgsPointer()), l.ArgsSize()))}}, nil
}

func compare(want, got *ops.Tensor, exact bool) error {
	if want.DType == graph.I32 || exact {
		for k := range want.Data {
			if want.Data[k] != got.Data[k] {
				if want.DType == graph.I32 {
					return fmt.Errorf("element %d: kernel %d, reference %d", k/4, got.I32()[k/4], want.I32()[k/4])
				}
				return fmt.Errorf("byte %d differs: kernel %#x, reference %#x (element %v vs %v)", k, got.Data[k], want.Data[k],
					got.Float(k/(want.DType.Bits()/8)), want.Float(k/(want.DType.Bits()/8)))
			}
		}
		return nil
	}
	var maxErr, maxRef float64
	for k := 0; k < want.Elements(); k++ {
		w, g := float64(want.Float(k)), float64(got.Float(k))
		if math.IsInf(w, 0) {
			if g != w {
				return fmt.Errorf("element %d is %v, reference %v", k, g, w)
			}
			continue // an empty key range's max is -inf in both
		}
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return fmt.Errorf("element %d is %v (unwritten or overflow), reference %v", k, g, w)
		}
		maxErr, maxRef = max(maxErr, math.Abs(w-g)), max(maxRef, math.Abs(w))
	}
	tol := 2e-5 * max(maxRef, 1)
	if want.DType == graph.BF16 {
		tol = 1e-2 * max(maxRef, 1)
	}
	if maxErr > tol {
		return fmt.Errorf("max abs error %.3g (largest |ref| %.3g, tolerance %.3g)", maxErr, maxRef, tol)
	}
	return nil
}

// Kernels lists the kernels the case launches (without running them).
func (c Case) Kernels() ([]string, error) {
	ls, err := launchesOf(c, fakeEnv(c, &countingDevice{}))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		out = append(out, l.Kernel)
	}
	return out, nil
}

// countingDevice hands out addresses and runs nothing.
type countingDevice struct{ next uint64 }

func (d *countingDevice) Alloc(n int, _ byte) uint64 {
	d.next += uint64(n+255) / 256 * 256
	return 1<<40 + d.next
}
func (d *countingDevice) Bytes(uint64, int) []byte { return nil }
func (d *countingDevice) Run([]Launch) error       { return errors.New("the counting device runs nothing") }

// fakeEnv gives a case's launch builder operands at placeholder addresses, to list the
// kernels it launches without running them.
func fakeEnv(c Case, mem Device) *env {
	e := &env{mem: mem}
	for _, t := range c.in {
		e.in = append(e.in, operand{dtype: t.DType, shape: t.Shape})
	}
	outTypes, _, err := referenceOf(c)
	if err == nil {
		for _, ot := range outTypes {
			e.out = append(e.out, operand{dtype: ot.DType, shape: ot.Shape.Eval(graph.Bindings{})})
		}
	}
	return e
}

// ---- inputs

// tied is f32 data drawn from a few values, so rows have many exact ties.
func tied(r *rand.Rand, shape ...int) *ops.Tensor {
	t := ops.NewTensor(graph.F32, shape...)
	for i := range t.F32() {
		t.F32()[i] = float32(r.IntN(4)) * 0.5
	}
	return t
}
