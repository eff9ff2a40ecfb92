package checkpoint

import (
	"fmt"
	"slices"

	"pistil/graph"
	"pistil/models/safetensors"
	"pistil/ops"
)

// storedModule is one module's tensors as the checkpoint holds them: a dense weight, or
// MLX affine-quantized codes with their scales and biases (model-spec §3.3, §4).
type storedModule struct {
	path           string
	weight         safetensors.TensorInfo
	file           *safetensors.File
	scales, biases safetensors.TensorInfo
	dtype          graph.DType // BF16/F16/F32 dense, Q4/Q8 quantized
	group          int
	logical        []int
}

// names lists the stored tensors the module consumes.
func (m *storedModule) names() []string {
	if m.dtype.Quantized() {
		return []string{m.weight.Name, m.scales.Name, m.biases.Name}
	}
	return []string{m.weight.Name}
}

func (m *storedModule) typ() graph.Type {
	return graph.Type{DType: m.dtype, Shape: graph.S(m.logical...), Group: m.group}
}

// where names a stored tensor and its file for error messages.
func (m *storedModule) where() string { return fmt.Sprintf("%s (in %s)", m.weight.Name, m.file.Path) }

// tensor maps the module's bytes into an ops.Tensor; nothing is copied.
func (m *storedModule) tensor(set *safetensors.Set) (*ops.Tensor, error) {
	data, err := set.Data(m.weight.Name)
	if err != nil {
		return nil, err
	}
	t := &ops.Tensor{DType: m.dtype, Shape: append([]int(nil), m.logical...), Group: m.group, Data: data}
	if m.dtype.Quantized() {
		if t.Scales, err = set.Data(m.scales.Name); err != nil {
			return nil, err
		}
		if t.Biases, err = set.Data(m.biases.Name); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// denseDType maps a stored float dtype to the graph's.
func denseDType(t safetensors.TensorInfo, file string) (graph.DType, error) {
	switch t.DType {
	case safetensors.BF16:
		return graph.BF16, nil
	case safetensors.F16:
		return graph.F16, nil
	case safetensors.F32:
		return graph.F32, nil
	}
	return graph.InvalidDType, fmt.Errorf("%s (in %s) has dtype %s; a dense weight must be BF16, F16 or F32", t.Name, file, t.DType)
}

// quantize fills in a quantized module's dtype, group and logical shape from the config's
// quantization block (the module's override, else the defaults) and cross-checks the bits
// against the stored shapes: bits = 32*weight.shape[-1] / (scales.shape[-1]*group_size).
func (c *Checkpoint) quantize(m *storedModule) error {
	w, s, b := m.weight, m.scales, m.biases
	where := m.where()
	if c.cfg.Quant == nil {
		return fmt.Errorf("%s is quantized (it has %s) but config.json has no quantization block", where, s.Name)
	}
	p := c.cfg.Quant.For(m.path)
	if w.DType != safetensors.U32 {
		return fmt.Errorf("%s has dtype %s; quantized codes must be U32", where, w.DType)
	}
	for _, t := range []safetensors.TensorInfo{s, b} {
		if t.DType != safetensors.BF16 {
			return fmt.Errorf("%s has dtype %s; MLX scales and biases must be BF16", t.Name, t.DType)
		}
	}
	nd := len(w.Shape)
	if nd < 2 || len(s.Shape) != nd || !slices.Equal(s.Shape, b.Shape) || !slices.Equal(s.Shape[:nd-1], w.Shape[:nd-1]) {
		return fmt.Errorf("%s: weight %v, scales %v and biases %v do not describe one quantized matrix", where, w.Shape, s.Shape, b.Shape)
	}
	words, groups := w.Shape[nd-1], s.Shape[nd-1]
	if groups == 0 || p.GroupSize <= 0 || 32*words%(groups*p.GroupSize) != 0 {
		return fmt.Errorf("%s: weight %v and scales %v fit no bit width at group size %d", where, w.Shape, s.Shape, p.GroupSize)
	}
	if bits := 32 * words / (groups * p.GroupSize); bits != p.Bits {
		return fmt.Errorf("%s: config says %d bits (group %d) for %s, but weight %v and scales %v imply %d bits",
			where, p.Bits, p.GroupSize, m.path, w.Shape, s.Shape, bits)
	}
	switch p.Bits {
	case 4:
		m.dtype = graph.Q4
	case 8:
		m.dtype = graph.Q8
	default:
		return fmt.Errorf("%s: %d-bit quantization is not supported (4 and 8 are)", where, p.Bits)
	}
	m.group = p.GroupSize
	m.logical = append(append([]int(nil), w.Shape[:nd-1]...), groups*p.GroupSize)
	return nil
}
