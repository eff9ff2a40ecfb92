package ops

import (
	"fmt"

	"pistil/graph"
)

// Sources (data bound from outside the graph) and views (new names for existing storage).
// None of them has a reference: the interpreter and the backends bind sources and resolve
// views themselves.

func init() {
	for _, src := range []struct{ name, doc string }{
		{"input", "per-step input bound by name (token ids)"},
		{"weight", "checkpoint tensor bound by canonical weight name"},
		{"state", "session state bound by state name (KV cache, conv and recurrent state)"},
	} {
		Default.Register(&Info{
			OpDef: graph.OpDef{Name: src.name, Doc: src.doc, Args: 0, Flags: graph.Source, Infer: inferSource},
			Cost:  func(v *graph.Value, b graph.Bindings) Cost { return Cost{} },
		})
	}
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "reshape", Doc: "same elements, new shape (a view)", Args: 1,
			Flags: graph.View, Attrs: []string{"shape"}, Infer: inferReshape},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return Cost{} },
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "select", Doc: "element {index} of a tuple result (a view)", Args: 1,
			Flags: graph.View, Attrs: []string{"index"}, Infer: inferSelect},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return Cost{} },
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "last_row", Doc: "f32[T,D] -> f32[1,D]: the last token's row (a view)", Args: 1,
			Flags: graph.View, Infer: inferLastRow},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return Cost{} },
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "slice_view", Doc: "slice's [start, end) along axis where every dimension before axis is 1, so the range is one contiguous run of its argument (a view)",
			Args: 1, Flags: graph.View, Attrs: []string{"axis", "start", "end"}, Infer: inferSliceView},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return Cost{} },
	})
}

// inferSliceView is slice's type, for arguments whose dimensions before the axis are all
// the constant 1 (SliceIsContiguous).
func inferSliceView(v *graph.Value) (graph.Type, error) {
	t, err := inferSlice(v)
	if err != nil {
		return graph.Type{}, err
	}
	if !SliceIsContiguous(v.Args[0].Type, int(v.Attrs.Int("axis"))) {
		return graph.Type{}, fmt.Errorf("slice_view along axis %d of %s: the dimensions before it are not all 1, so the range is not contiguous", v.Attrs.Int("axis"), v.Args[0].Type.Shape)
	}
	return t, nil
}

// SliceIsContiguous reports whether a slice of t along axis is one contiguous run of t's
// elements: every dimension before axis is the constant 1.
func SliceIsContiguous(t graph.Type, axis int) bool {
	if axis < 0 || axis >= len(t.Shape) {
		return false
	}
	for _, d := range t.Shape[:axis] {
		if !d.IsConst() || d.Const != 1 {
			return false
		}
	}
	return true
}

// SliceViewOffset is the byte offset of a slice_view's first element in its argument of
// type t: start times the bytes of one index along axis.
func SliceViewOffset(t graph.Type, axis, start int, bind graph.Bindings) int64 {
	inner := int64(t.DType.Bits() / 8)
	for _, d := range t.Shape[axis+1:] {
		inner *= int64(d.Eval(bind))
	}
	return int64(start) * inner
}

// inferSource accepts the type the builder gave: a source's type cannot be derived.
func inferSource(v *graph.Value) (graph.Type, error) {
	if len(v.Args) != 0 {
		return graph.Type{}, fmt.Errorf("%s takes no args, got %d", v.Op, len(v.Args))
	}
	if v.Name == "" {
		return graph.Type{}, fmt.Errorf("%s has no name to bind", v.Op)
	}
	t := v.Type
	if t.IsTuple() || t.DType == graph.InvalidDType {
		return graph.Type{}, fmt.Errorf("%s %s has no tensor type", v.Op, v.Name)
	}
	if t.DType.Quantized() {
		if t.Group <= 0 || len(t.Shape) == 0 {
			return graph.Type{}, fmt.Errorf("%s %s: quantized type %s needs a group size and a shape", v.Op, v.Name, t)
		}
		if k := last(t.Shape); !k.IsConst() || k.Const%t.Group != 0 {
			return graph.Type{}, fmt.Errorf("%s %s: last dimension %s is not a multiple of group %d", v.Op, v.Name, k, t.Group)
		}
	}
	return t, nil
}

func inferReshape(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantTensor(v, 0, "x")
	if err != nil {
		return graph.Type{}, err
	}
	if x.DType.Quantized() {
		return graph.Type{}, fmt.Errorf("reshape of quantized %s: its groups are tied to the last dimension", x)
	}
	if err := requireAttrs(v, "shape"); err != nil {
		return graph.Type{}, err
	}
	shape, err := graph.ParseShape(v.Attrs.String("shape"))
	if err != nil {
		return graph.Type{}, fmt.Errorf("reshape: %w", err)
	}
	if !sameElements(x.Shape, shape) {
		return graph.Type{}, fmt.Errorf("reshape %s to %s changes the element count", x.Shape, shape)
	}
	return graph.TensorType(x.DType, shape...), nil
}

func inferSelect(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	if err := requireAttrs(v, "index"); err != nil {
		return graph.Type{}, err
	}
	t := arg(v, 0)
	if !t.IsTuple() {
		return graph.Type{}, fmt.Errorf("select of %s, which is not a tuple", t)
	}
	i := v.Attrs.Int("index")
	if i < 0 || i >= len(t.Elems) {
		return graph.Type{}, fmt.Errorf("select index %d out of range for %s", i, t)
	}
	return t.Elems[i], nil
}

func inferLastRow(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "x", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	return f32(graph.D(1), x.Shape[1]), nil
}
