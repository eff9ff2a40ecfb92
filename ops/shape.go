package ops

import (
	"fmt"
	"strings"

	"pistil/graph"
)

// This file holds the small vocabulary every Infer and Cost function is written in: arg
// lookups that say which arg is wrong and why, symbolic dimension comparisons, and byte
// counts of partial reads.

// arg returns the type of v's i-th argument.
func arg(v *graph.Value, i int) graph.Type { return v.Args[i].Type }

// wantArgs checks the argument count; Builder and Check call Infer with whatever the
// caller passed, so the count is the first thing to verify.
func wantArgs(v *graph.Value, n int) error {
	if len(v.Args) != n {
		return fmt.Errorf("%s takes %d args, got %d", v.Op, n, len(v.Args))
	}
	for i, a := range v.Args {
		if a == nil {
			return fmt.Errorf("%s arg %d is missing", v.Op, i)
		}
	}
	return nil
}

// argName labels an argument in messages: "arg 1 (w)".
func argName(i int, name string) string { return fmt.Sprintf("arg %d (%s)", i, name) }

// wantTensor rejects tuples where a tensor is needed.
func wantTensor(v *graph.Value, i int, name string) (graph.Type, error) {
	t := arg(v, i)
	if t.IsTuple() {
		return t, fmt.Errorf("%s is a tuple %s; select an element first", argName(i, name), t)
	}
	return t, nil
}

// wantDType checks a tensor arg's dtype against an allowed set.
func wantDType(v *graph.Value, i int, name string, allowed ...graph.DType) (graph.Type, error) {
	t, err := wantTensor(v, i, name)
	if err != nil {
		return t, err
	}
	for _, d := range allowed {
		if t.DType == d {
			return t, nil
		}
	}
	names := make([]string, len(allowed))
	for j, d := range allowed {
		names[j] = d.String()
	}
	return t, fmt.Errorf("%s has dtype %s, want %s", argName(i, name), t.DType, strings.Join(names, " or "))
}

// wantRank checks a tensor arg's rank (and dtype, when allowed is given).
func wantRank(v *graph.Value, i int, name string, rank int, allowed ...graph.DType) (graph.Type, error) {
	t, err := wantDType(v, i, name, allowed...)
	if err != nil {
		return t, err
	}
	if len(t.Shape) != rank {
		return t, fmt.Errorf("%s has shape %s, want rank %d", argName(i, name), t.Shape, rank)
	}
	return t, nil
}

// wantMinRank checks that a tensor arg has at least rank dimensions.
func wantMinRank(v *graph.Value, i int, name string, rank int, allowed ...graph.DType) (graph.Type, error) {
	t, err := wantDType(v, i, name, allowed...)
	if err != nil {
		return t, err
	}
	if len(t.Shape) < rank {
		return t, fmt.Errorf("%s has shape %s, want rank >= %d", argName(i, name), t.Shape, rank)
	}
	return t, nil
}

// sameDim checks that two symbolic dimensions are identical, naming both sides.
func sameDim(what string, a, b graph.Dim) error {
	if a != b {
		return fmt.Errorf("%s mismatch: %s vs %s", what, a, b)
	}
	return nil
}

// last is a shape's innermost dimension.
func last(s graph.Shape) graph.Dim { return s[len(s)-1] }

// constDim returns a dimension's value when it has no symbol.
func constDim(what string, d graph.Dim) (int, error) {
	if !d.IsConst() {
		return 0, fmt.Errorf("%s must be a constant dimension, got %s", what, d)
	}
	return d.Const, nil
}

// withLast replaces the innermost dimension.
func withLast(s graph.Shape, d graph.Dim) graph.Shape {
	out := append(graph.Shape(nil), s...)
	out[len(out)-1] = d
	return out
}

// f32 builds an F32 tensor type.
func f32(shape ...graph.Dim) graph.Type { return graph.TensorType(graph.F32, shape...) }

// floatDTypes are the dtypes of dense float weights and states.
var floatDTypes = []graph.DType{graph.F32, graph.BF16, graph.F16}

// weightDTypes are every dtype a weight can have.
var weightDTypes = []graph.DType{graph.F32, graph.BF16, graph.F16, graph.Q4, graph.Q8}

// requireAttrs checks that each named attribute is present.
func requireAttrs(v *graph.Value, names ...string) error {
	for _, n := range names {
		if _, ok := v.Attrs[n]; !ok {
			return fmt.Errorf("%s needs attribute %q", v.Op, n)
		}
	}
	return nil
}

// positiveFloatAttr reads a float attribute that must be > 0.
func positiveFloatAttr(v *graph.Value, name string) (float64, error) {
	if err := requireAttrs(v, name); err != nil {
		return 0, err
	}
	x := v.Attrs.Float(name)
	if !(x > 0) {
		return 0, fmt.Errorf("%s attribute %s = %v must be positive", v.Op, name, v.Attrs[name])
	}
	return x, nil
}

// elemsOf is a shape's element count with the symbols bound.
func elemsOf(t graph.Type, b graph.Bindings) int64 { return int64(t.Elements(b)) }

// bytesOfElems is the storage of n elements of t's dtype; for quantized types it includes
// the bf16 scale and bias of each group.
func bytesOfElems(t graph.Type, n int64) int64 {
	if t.DType.Quantized() {
		return n*int64(t.DType.Bits())/8 + n/int64(t.Group)*4
	}
	return n * int64(t.DType.Bits()) / 8
}

// argBytes sums the full storage of v's args.
func argBytes(v *graph.Value, b graph.Bindings) int64 {
	var n int64
	for _, a := range v.Args {
		n += a.Type.Bytes(b)
	}
	return n
}

// plainCost is the cost of an op that reads each arg once in full and writes its result
// once, doing flopsPerOut flops per output element.
func plainCost(v *graph.Value, b graph.Bindings, flopsPerOut int64) Cost {
	out := v.Type.Bytes(b)
	return Cost{BytesRead: argBytes(v, b), BytesWritten: out, Flops: flopsPerOut * elemsOf(v.Type, b)}
}

// probeBindings are bindings at which symbolic element counts are compared: a product of
// linear forms in T, C and N that agrees at all of them is, for the shapes models use,
// the same product.
var probeBindings = []graph.Bindings{{T: 1, C: 0, N: 1}, {T: 3, C: 5, N: 7}, {T: 17, C: 2, N: 64}, {T: 64, C: 129, N: 1031}}

// sameElements reports whether two symbolic shapes hold the same number of elements for
// every binding.
func sameElements(a, b graph.Shape) bool {
	for _, bind := range probeBindings {
		na, nb := 1, 1
		for _, d := range a {
			na *= d.Eval(bind)
		}
		for _, d := range b {
			nb *= d.Eval(bind)
		}
		if na != nb {
			return false
		}
	}
	return true
}
