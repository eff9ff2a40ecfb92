package checkpoint

import (
	"fmt"
	"slices"
	"strings"

	"pistil/graph"
	"pistil/models/safetensors"
	"pistil/ops"
)

// binding is how one canonical weight comes out of the checkpoint: which stored tensors
// it consumes, the transform, the resulting graph type, and how to build it.
type binding struct {
	canonical string
	transform Transform
	stored    []string
	typ       graph.Type
	build     func() (*ops.Tensor, error)
}

// missingError says which stored tensors a canonical weight needed and did not find.
type missingError struct {
	canonical string
	want      []string
	present   []string // stored tensors of the weight that do exist (partial per-expert sets)
}

func (e *missingError) Error() string {
	return fmt.Sprintf("%s: checkpoint has no %s", e.canonical, strings.Join(e.want, " or "))
}

// resolve maps a canonical name to its binding from the headers alone (no data is read)
// and checks the logical shape against the config. On a shape or dtype error it still
// returns the binding when the stored tensors are known, so Bind does not also call them
// unused.
func (c *Checkpoint) resolve(name string) (*binding, error) {
	want, ok := c.shapes[name]
	if !ok {
		return nil, fmt.Errorf("%q is not a canonical weight of this model (%d layers)", name, c.cfg.NumLayers)
	}
	var b *binding
	var err error
	switch {
	case strings.Contains(name, ".mlp.experts."):
		b, err = c.resolveExperts(name)
	case strings.HasSuffix(name, ".linear_attn.conv1d"):
		b, err = c.resolveConv(name)
	case strings.HasSuffix(name, ".linear_attn.A_log"):
		b, err = c.resolveDense(name, ToF32, toF32)
	case zeroCentred(name) && c.layout != MLX:
		b, err = c.resolveDense(name, OnePlusW, onePlusW)
	default:
		var m *storedModule
		m, err = c.module(name, c.storedPath(name))
		if m != nil {
			b = &binding{canonical: name, transform: Identity, stored: m.names()}
		}
		if err == nil {
			b.typ = m.typ()
			b.build = func() (*ops.Tensor, error) { return m.tensor(c.set) }
		}
	}
	if err != nil {
		return b, err
	}
	if got := b.typ.Shape; !got.Equal(graph.S(want...)) {
		return b, fmt.Errorf("%s: %s gives logical shape %s, but the config implies %v",
			name, c.describe(b.stored[0]), got, want)
	}
	return b, nil
}

// describe names a stored tensor with its dtype, stored shape and file.
func (c *Checkpoint) describe(stored string) string {
	t, f, ok := c.set.Info(stored)
	if !ok {
		return stored
	}
	return fmt.Sprintf("%s %s %v (in %s)", stored, t.DType, t.Shape, f.Path)
}

// storedPath is the stored module path (or parameter name) of a non-expert canonical name.
func (c *Checkpoint) storedPath(canonical string) string {
	if canonical == "lm_head" {
		if c.cfg.TieWordEmbeddings && !c.set.Has(c.layout.lmHead()+".weight") {
			return c.layout.modulePrefix() + "embed_tokens"
		}
		return c.layout.lmHead()
	}
	return c.layout.modulePrefix() + canonical
}

// module finds a module's stored tensors: path+".weight" (path itself for a parameter such
// as A_log), plus .scales and .biases when it is quantized (a module is quantized iff its
// .scales exists, model-spec §3.3).
func (c *Checkpoint) module(canonical, path string) (*storedModule, error) {
	wname := path + ".weight"
	if isParameter(canonical) {
		wname = path
	}
	w, f, ok := c.set.Info(wname)
	if !ok {
		return nil, &missingError{canonical: canonical, want: []string{wname}}
	}
	m := &storedModule{path: path, weight: w, file: f}
	sname, bname := path+".scales", path+".biases"
	s, _, quant := c.set.Info(sname)
	if !quant || isParameter(canonical) {
		dt, err := denseDType(w, f.Path)
		if err != nil {
			return m, fmt.Errorf("%s: %w", canonical, err)
		}
		m.dtype, m.logical = dt, w.Shape
		return m, nil
	}
	m.scales = s
	bi, _, ok := c.set.Info(bname)
	if !ok {
		m.biases = safetensors.TensorInfo{Name: bname}
		return m, &missingError{canonical: canonical, want: []string{bname}, present: []string{wname, sname}}
	}
	m.biases = bi
	if err := c.quantize(m); err != nil {
		return m, fmt.Errorf("%s: %w", canonical, err)
	}
	return m, nil
}

// resolveDense binds a weight that must be stored dense and goes through a transform that
// produces F32 (OnePlusW, ToF32).
func (c *Checkpoint) resolveDense(name string, tr Transform, fn func(*ops.Tensor) (*ops.Tensor, error)) (*binding, error) {
	m, err := c.module(name, c.storedPath(name))
	if m == nil {
		return nil, err
	}
	b := &binding{canonical: name, transform: tr, stored: m.names()}
	if err != nil {
		return b, err
	}
	if m.dtype.Quantized() {
		return b, fmt.Errorf("%s: %s is quantized; %s needs a dense tensor", name, m.where(), tr)
	}
	b.typ = graph.TensorType(graph.F32, graph.S(m.logical...)...)
	b.build = func() (*ops.Tensor, error) {
		t, err := m.tensor(c.set)
		if err != nil {
			return nil, err
		}
		return fn(t)
	}
	return b, nil
}

// resolveConv binds conv1d through SqueezeConv, checking the stored form against the
// layout's convention.
func (c *Checkpoint) resolveConv(name string) (*binding, error) {
	m, err := c.module(name, c.storedPath(name))
	if m == nil {
		return nil, err
	}
	b := &binding{canonical: name, transform: SqueezeConv, stored: m.names()}
	if err != nil {
		return b, err
	}
	if m.dtype.Quantized() {
		return b, fmt.Errorf("%s: %s is quantized; conv1d must be dense", name, m.where())
	}
	mlx := c.layout == MLX
	probe, err := squeezeConv(&ops.Tensor{DType: m.dtype, Shape: m.logical}, mlx)
	if err != nil {
		return b, fmt.Errorf("%s: %s: %w", name, m.where(), err)
	}
	b.typ = graph.TensorType(m.dtype, graph.S(probe.Shape...)...)
	b.build = func() (*ops.Tensor, error) {
		t, err := m.tensor(c.set)
		if err != nil {
			return nil, err
		}
		return squeezeConv(t, mlx)
	}
	return b, nil
}

// resolveExperts binds layers.i.mlp.experts.{gate,up,down}_proj: MLX switch_mlp stacks as
// they are; HF fused gate_up_proj through the view transforms; HF down_proj stacked as
// it is; per-expert tensors (either HF layout) through StackExperts.
func (c *Checkpoint) resolveExperts(name string) (*binding, error) {
	cut := strings.Index(name, "mlp.experts.")
	layer, proj := name[:cut], name[cut+len("mlp.experts."):]
	base := c.layout.modulePrefix() + layer + "mlp."
	if c.layout == MLX {
		m, err := c.module(name, base+"switch_mlp."+proj)
		if m == nil {
			return nil, err
		}
		b := &binding{canonical: name, transform: Identity, stored: m.names()}
		if err == nil {
			b.typ = m.typ()
			b.build = func() (*ops.Tensor, error) { return m.tensor(c.set) }
		}
		return b, err
	}
	fused, whole := base+"experts.gate_up_proj", base+"experts.down_proj"
	perExpert := func(e int) string { return fmt.Sprintf("%sexperts.%d.%s.weight", base, e, proj) }
	switch {
	case proj != "down_proj" && c.set.Has(fused):
		return c.fusedView(name, fused, proj == "up_proj")
	case proj == "down_proj" && c.set.Has(whole):
		return c.denseParam(name, whole)
	case c.set.Has(perExpert(0)):
		return c.stackedExperts(name, perExpert)
	}
	stacked := whole
	if proj != "down_proj" {
		stacked = fused
	}
	return nil, &missingError{canonical: name, want: []string{stacked, perExpert(0) + " .. " + perExpert(c.cfg.NumExperts-1)}}
}

// denseParam binds a stored tensor without a .weight suffix as it is.
func (c *Checkpoint) denseParam(name, stored string) (*binding, error) {
	t, f, _ := c.set.Info(stored)
	b := &binding{canonical: name, transform: Identity, stored: []string{stored}}
	dt, err := denseDType(t, f.Path)
	if err != nil {
		return b, fmt.Errorf("%s: %w", name, err)
	}
	m := &storedModule{path: stored, weight: t, file: f, dtype: dt, logical: t.Shape}
	b.typ = m.typ()
	b.build = func() (*ops.Tensor, error) { return m.tensor(c.set) }
	return b, nil
}

func (c *Checkpoint) fusedView(name, fused string, upper bool) (*binding, error) {
	tr := FusedGateView
	if upper {
		tr = FusedUpView
	}
	b, err := c.denseParam(name, fused)
	b.transform = tr
	if err != nil {
		return b, err
	}
	s := b.typ.Shape
	if len(s) != 3 || s[1].Const%2 != 0 {
		return b, fmt.Errorf("%s: %s is not [E, 2I, H]", name, c.describe(fused))
	}
	b.typ.Shape = graph.Shape{s[0], graph.D(s[1].Const / 2), s[2]}
	whole := b.build
	b.build = func() (*ops.Tensor, error) {
		t, err := whole()
		if err != nil {
			return nil, err
		}
		return fusedHalf(t, upper)
	}
	return b, nil
}

func (c *Checkpoint) stackedExperts(name string, perExpert func(int) string) (*binding, error) {
	b := &binding{canonical: name, transform: StackExperts}
	var missing []string
	var mods []*storedModule
	for e := 0; e < c.cfg.NumExperts; e++ {
		n := perExpert(e)
		t, f, ok := c.set.Info(n)
		if !ok {
			missing = append(missing, n)
			continue
		}
		b.stored = append(b.stored, n)
		dt, err := denseDType(t, f.Path)
		if err != nil {
			return b, fmt.Errorf("%s: %w", name, err)
		}
		mods = append(mods, &storedModule{path: n, weight: t, file: f, dtype: dt, logical: t.Shape})
	}
	if len(missing) > 0 {
		return nil, &missingError{canonical: name, want: []string{strings.Join(missing, ", ")}, present: b.stored}
	}
	first := mods[0]
	for _, m := range mods[1:] {
		if m.dtype != first.dtype || !slices.Equal(m.logical, first.logical) {
			return b, fmt.Errorf("%s: %s is %s %v but %s is %s %v", name, m.weight.Name, m.dtype, m.logical, first.weight.Name, first.dtype, first.logical)
		}
	}
	b.typ = graph.TensorType(first.dtype, graph.S(append([]int{len(mods)}, first.logical...)...)...)
	b.build = func() (*ops.Tensor, error) {
		parts := make([]*ops.Tensor, len(mods))
		for i, m := range mods {
			t, err := m.tensor(c.set)
			if err != nil {
				return nil, err
			}
			parts[i] = t
		}
		return stackExperts(parts)
	}
	return b, nil
}
