package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Elementwise ops (float32 results; inputs may be dense float weights such as A_log or
// dt_bias) and slice, the copy of a sub-range along one axis.

type unaryFn func(x float32) float32

var unaryOps = []struct {
	name, doc string
	flops     int64
	fn        unaryFn
}{
	{"neg", "-x", 1, func(x float32) float32 { return -x }},
	{"exp", "e^x", 4, func(x float32) float32 { return float32(math.Exp(float64(x))) }},
	{"sigmoid", "1 / (1 + e^-x)", 4, sigmoid},
	{"silu", "x * sigmoid(x)", 5, silu},
	{"softplus", "log(1 + e^x), x when x > 20", 5, softplus},
}

var binaryOps = []struct {
	name, doc string
	fn        func(a, b float32) float32
}{
	{"add", "a + b (b broadcasts: a suffix of a's shape, or a's shape with some dims 1)", func(a, b float32) float32 { return a + b }},
	{"mul", "a * b (b broadcasts: a suffix of a's shape, or a's shape with some dims 1)", func(a, b float32) float32 { return a * b }},
}

func init() {
	for _, u := range unaryOps {
		ref := unaryRef(u.fn)
		if u.name == "silu" {
			// The fast kernels' SiLU, like every op that fuses one (siluGate), so that a
			// graph computes the same numbers fused or not.
			ref = refSiLU
		}
		Default.Register(&Info{
			OpDef: graph.OpDef{Name: u.name, Doc: u.doc, Args: 1, Flags: graph.Elementwise | graph.ReorderSafe,
				Infer: inferUnary},
			Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, u.flops) },
			Ref:  ref,
		})
	}
	for _, op := range binaryOps {
		Default.Register(&Info{
			OpDef: graph.OpDef{Name: op.name, Doc: op.doc, Args: 2, Flags: graph.Elementwise | graph.ReorderSafe,
				Infer: inferBroadcast},
			Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 1) },
			Ref:  broadcastRef(op.fn),
		})
	}
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "swiglu", Doc: "silu(gate) * up", Args: 2, Flags: graph.Elementwise | graph.ReorderSafe,
			Infer: inferSwiGLU},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 6) },
		Ref:  refSwiGLU,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "slice", Doc: "copy of [start, end) along axis", Args: 1,
			Attrs: []string{"axis", "start", "end"}, Infer: inferSlice},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			return Cost{BytesRead: v.Type.Bytes(b), BytesWritten: v.Type.Bytes(b)}
		},
		Ref: refSlice,
	})
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func silu(x float32) float32 { return x * sigmoid(x) }

// softplus follows PyTorch: the identity above 20, where log(1+e^x) rounds to x anyway.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

func inferUnary(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantDType(v, 0, "x", floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	return f32(x.Shape...), nil
}

func refSiLU(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, err := floats(in[0])
	if err != nil {
		return fmt.Errorf("%s: %w", v.Op, err)
	}
	siluGate(env, out[0].F32(), x, nil)
	return nil
}

func unaryRef(fn unaryFn) func(env *Env, v *graph.Value, in, out []*Tensor) error {
	return func(env *Env, v *graph.Value, in, out []*Tensor) error {
		x, err := floats(in[0])
		if err != nil {
			return fmt.Errorf("%s: %w", v.Op, err)
		}
		y := out[0].F32()
		for i, xv := range x {
			y[i] = fn(xv)
		}
		return nil
	}
}

func inferBroadcast(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	a, err := wantDType(v, 0, "a", floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	b, err := wantDType(v, 1, "b", floatDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	if len(b.Shape) > len(a.Shape) {
		return graph.Type{}, fmt.Errorf("b %s has more dims than a %s", b.Shape, a.Shape)
	}
	off := len(a.Shape) - len(b.Shape)
	for i, d := range b.Shape {
		if d != a.Shape[off+i] && d != graph.D(1) {
			return graph.Type{}, fmt.Errorf("b %s does not broadcast to a %s (dim %d: %s vs %s)", b.Shape, a.Shape, i, d, a.Shape[off+i])
		}
	}
	return f32(a.Shape...), nil
}

// broadcastRef applies fn to a and b broadcast to a's shape. The common cases (equal
// shapes, b a suffix of a) index b by modulo; others walk a's coordinates.
func broadcastRef(fn func(a, b float32) float32) func(env *Env, v *graph.Value, in, out []*Tensor) error {
	return func(env *Env, v *graph.Value, in, out []*Tensor) error {
		a, err := floats(in[0])
		if err != nil {
			return fmt.Errorf("%s a: %w", v.Op, err)
		}
		b, err := floats(in[1])
		if err != nil {
			return fmt.Errorf("%s b: %w", v.Op, err)
		}
		y := out[0].F32()
		if len(b) == 0 {
			return nil
		}
		strides, suffix := broadcastStrides(in[0].Shape, in[1].Shape)
		if suffix {
			nb := len(b)
			for i, av := range a {
				y[i] = fn(av, b[i%nb])
			}
			return nil
		}
		shape := in[0].Shape
		coord := make([]int, len(shape))
		bi := 0
		for i, av := range a {
			y[i] = fn(av, b[bi])
			for d := len(shape) - 1; d >= 0; d-- {
				coord[d]++
				bi += strides[d]
				if coord[d] < shape[d] {
					break
				}
				bi -= strides[d] * coord[d]
				coord[d] = 0
			}
		}
		return nil
	}
}

// broadcastStrides returns b's element stride along each of a's dims (0 where b is
// broadcast), and whether b is simply a suffix of a (index b modulo its size).
func broadcastStrides(a, b []int) ([]int, bool) {
	strides := make([]int, len(a))
	off := len(a) - len(b)
	suffix := true
	s := 1
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == 1 && a[off+i] != 1 {
			suffix = false
		} else {
			strides[off+i] = s
		}
		s *= b[i]
	}
	return strides, suffix
}

func inferSwiGLU(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	g, err := wantDType(v, 0, "gate", graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	u, err := wantDType(v, 1, "up", graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if !g.Shape.Equal(u.Shape) {
		return graph.Type{}, fmt.Errorf("gate %s and up %s differ in shape", g.Shape, u.Shape)
	}
	return g, nil
}

func refSwiGLU(env *Env, v *graph.Value, in, out []*Tensor) error {
	g, u, y := in[0].F32(), in[1].F32(), out[0].F32()
	siluGate(env, y, g, u)
	return nil
}

func inferSlice(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantMinRank(v, 0, "x", 1, graph.F32, graph.I32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := requireAttrs(v, "axis", "start", "end"); err != nil {
		return graph.Type{}, err
	}
	axis, start, end := v.Attrs.Int("axis"), v.Attrs.Int("start"), v.Attrs.Int("end")
	if axis < 0 || axis >= len(x.Shape) {
		return graph.Type{}, fmt.Errorf("slice axis %d out of range for %s", axis, x.Shape)
	}
	n, err := constDim(fmt.Sprintf("slice axis %d of %s", axis, x.Shape), x.Shape[axis])
	if err != nil {
		return graph.Type{}, err
	}
	if start < 0 || end > n || start >= end {
		return graph.Type{}, fmt.Errorf("slice [%d, %d) is empty or outside axis %d of size %d", start, end, axis, n)
	}
	shape := append(graph.Shape(nil), x.Shape...)
	shape[axis] = graph.D(end - start)
	return graph.TensorType(x.DType, shape...), nil
}

func refSlice(env *Env, v *graph.Value, in, out []*Tensor) error {
	axis, start, end := v.Attrs.Int("axis"), v.Attrs.Int("start"), v.Attrs.Int("end")
	shape := in[0].Shape
	outer, inner := 1, 4 // inner counts bytes: F32 and I32 are both 4 bytes wide
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	src, dst := in[0].Data, out[0].Data
	n := shape[axis]
	width := (end - start) * inner
	for o := 0; o < outer; o++ {
		copy(dst[o*width:(o+1)*width], src[(o*n+start)*inner:(o*n+end)*inner])
	}
	return nil
}
