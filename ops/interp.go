package ops

import (
	"fmt"
	"slices"

	"pistil/graph"
)

// Run executes g value by value with the reference of each op: the oracle for pass tests
// (run before and after a pass, compare) and for model golden tests. Source values
// (input, weight, state) are fetched through source and checked against their declared
// type with env.Bind; views alias their argument; every compute result is a fresh tensor,
// so the source tensors are never written (state updates land in new tensors returned
// under the state's output name). It returns the graph outputs by name.
func Run(g *graph.Graph, env *Env, source func(v *graph.Value) (*Tensor, error)) (map[string]*Tensor, error) {
	if env == nil {
		env = &Env{Workers: 1}
	}
	r := &interp{env: env, vals: make([][]*Tensor, len(g.Values)), uses: g.Uses()}
	for _, o := range g.Outputs {
		r.uses[o.Value.ID] += len(g.Values) // outputs are never released
	}
	for i, v := range g.Values {
		if v.ID != graph.ID(i) {
			return nil, fmt.Errorf("run: value at index %d has ID %d (renumber the graph)", i, v.ID)
		}
		if err := r.step(v, source); err != nil {
			return nil, fmt.Errorf("run %s: %w", describe(v), err)
		}
	}
	out := make(map[string]*Tensor, len(g.Outputs))
	for _, o := range g.Outputs {
		ts := r.vals[o.Value.ID]
		if len(ts) != 1 {
			return nil, fmt.Errorf("run: output %s is a tuple; select an element", o.Name)
		}
		out[o.Name] = ts[0]
	}
	return out, nil
}

// describe names a value in errors: "v12 gated_delta (layers.0.linear_attn.delta)".
func describe(v *graph.Value) string {
	if v.Name != "" {
		return fmt.Sprintf("%s %s (%s)", v.Ref(), v.Op, v.Name)
	}
	return v.Ref() + " " + v.Op
}

type interp struct {
	env  *Env
	vals [][]*Tensor // per value ID: one tensor, or one per tuple element
	uses []int       // remaining uses; a value's tensors are dropped after its last use
}

func (r *interp) step(v *graph.Value, source func(v *graph.Value) (*Tensor, error)) error {
	info, ok := Default.Info(v.Op)
	if !ok {
		return fmt.Errorf("unknown op %q", v.Op)
	}
	in := make([]*Tensor, len(v.Args))
	for i, a := range v.Args {
		ts := r.vals[a.ID]
		if ts == nil {
			return fmt.Errorf("arg %d (%s) has no value: the graph is not in topological order", i, a.Ref())
		}
		if len(ts) == 1 && !a.Type.IsTuple() {
			in[i] = ts[0]
		}
	}
	var err error
	switch {
	case info.Has(graph.Source):
		err = r.source(v, source)
	case info.Has(graph.View):
		err = r.view(v, in)
	default:
		err = r.compute(v, info, in)
	}
	if err != nil {
		return err
	}
	for _, a := range v.Args {
		if r.uses[a.ID]--; r.uses[a.ID] == 0 {
			r.vals[a.ID] = nil
		}
	}
	return nil
}

func (r *interp) source(v *graph.Value, source func(v *graph.Value) (*Tensor, error)) error {
	t, err := source(v)
	if err != nil {
		return err
	}
	if t == nil {
		return fmt.Errorf("source gave no tensor for %s", v.Name)
	}
	want := v.Type.Shape.Eval(r.env.Bind)
	if t.DType != v.Type.DType || !slices.Equal(t.Shape, want) || (v.Type.DType.Quantized() && t.Group != v.Type.Group) {
		return fmt.Errorf("%s is bound to a %s%v (group %d) tensor, the graph declares %s = %v with %+v",
			v.Name, t.DType, t.Shape, t.Group, v.Type, want, r.env.Bind)
	}
	if !t.DType.Quantized() && t.Stride0 == 0 {
		if need := t.Elements() * t.DType.Bits() / 8; len(t.Data) < need {
			return fmt.Errorf("%s holds %d bytes, its shape %v needs %d", v.Name, len(t.Data), t.Shape, need)
		}
	}
	r.vals[v.ID] = []*Tensor{t}
	return nil
}

func (r *interp) view(v *graph.Value, in []*Tensor) error {
	switch v.Op {
	case "select":
		ts := r.vals[v.Args[0].ID]
		i := v.Attrs.Int("index")
		if i < 0 || i >= len(ts) {
			return fmt.Errorf("select index %d of a %d-tuple", i, len(ts))
		}
		r.vals[v.ID] = []*Tensor{ts[i]}
		return nil
	case "reshape":
		x := in[0]
		shape := v.Type.Shape.Eval(r.env.Bind)
		view := *x
		view.Shape = shape
		if view.Elements() != x.Elements() {
			return fmt.Errorf("reshape of %v to %v changes the element count", x.Shape, shape)
		}
		r.vals[v.ID] = []*Tensor{&view}
		return nil
	case "slice_view":
		x := in[0]
		off := SliceViewOffset(v.Args[0].Type, int(v.Attrs.Int("axis")), int(v.Attrs.Int("start")), r.env.Bind)
		t := v.Type
		n := t.Bytes(r.env.Bind)
		if off+n > int64(len(x.Data)) {
			return fmt.Errorf("slice_view of %v: bytes [%d, %d) outside its %d", x.Shape, off, off+n, len(x.Data))
		}
		r.vals[v.ID] = []*Tensor{{DType: x.DType, Shape: t.Shape.Eval(r.env.Bind), Data: x.Data[off : off+n]}}
		return nil
	case "last_row":
		x := in[0]
		T, D := x.Shape[0], x.Shape[1]
		if T < 1 {
			return fmt.Errorf("last_row of %v: no rows", x.Shape)
		}
		bytes := D * x.DType.Bits() / 8
		r.vals[v.ID] = []*Tensor{{DType: x.DType, Shape: []int{1, D}, Data: x.Data[(T-1)*bytes : T*bytes]}}
		return nil
	}
	return fmt.Errorf("view op %q has no interpreter rule", v.Op)
}

func (r *interp) compute(v *graph.Value, info *Info, in []*Tensor) error {
	if info.Ref == nil {
		return fmt.Errorf("op %s has no reference", v.Op)
	}
	for i, t := range in {
		if t == nil {
			return fmt.Errorf("arg %d is a tuple; select an element", i)
		}
	}
	elems := []graph.Type{v.Type}
	if v.Type.IsTuple() {
		elems = v.Type.Elems
	}
	out := make([]*Tensor, len(elems))
	for i, t := range elems {
		if t.DType.Quantized() {
			return fmt.Errorf("result %d has quantized type %s; references produce dense tensors", i, t)
		}
		out[i] = NewTensor(t.DType, t.Shape.Eval(r.env.Bind)...)
	}
	if err := info.Ref(r.env, v, in, out); err != nil {
		return err
	}
	r.vals[v.ID] = out
	return nil
}
