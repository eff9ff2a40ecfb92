//go:build linux

// Package cuda is the NVIDIA backend: it runs the same compiled plans as the CPU backend
// on a GPU, through the CUDA driver API and NVRTC loaded with purego (no cgo). Kernels
// come from ops/kernels (the portable dialect plus the CUDA prelude), compiled once per
// process for the device's architecture. Load uploads a plan's weights (shared between
// the plans of one model), allocates its scratch arena and outputs, and turns every
// dispatch into one kernel launch whose arguments are fixed device addresses; the
// per-step scalars (C, T, N and the token ids) live in a small device buffer that Run
// writes before each step, so the launches, or the CUDA graph built once from them with
// the plan's dependency edges, replay unchanged.
package cuda

import (
	"fmt"
	"sync"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/plan"
)

func init() {
	exec.RegisterBackend("cuda", func(o exec.BackendOptions) (exec.Backend, error) {
		g, err := openDevice()
		if err != nil {
			return nil, err
		}
		var funcs map[string]uintptr
		if err := g.do(func() (err error) { funcs, err = g.kernelsFor(o.LateLoads, o.KernelDefines); return err }); err != nil {
			return nil, err
		}
		return &Backend{dev: g, funcs: funcs, graphs: o.Graphs, programmatic: o.ProgrammaticLaunch, weights: map[string]*deviceWeight{}}, nil
	})
}

// Backend runs plans on GPU 0. One instance serves one model: its weights are uploaded
// once and shared by every plan (decode, prefill chunk, remainder pieces).
type Backend struct {
	dev *device
	// funcs are the kernels this backend launches: the device's default module, or a
	// module without early loads (exec.BackendOptions.LateLoads) or with other tuning
	// macros (KernelDefines).
	funcs  map[string]uintptr
	graphs bool
	// programmatic: graph edges as programmatic dependencies, where the device and
	// driver have them (device.programmatic).
	programmatic bool

	mu      sync.Mutex
	weights map[string]*deviceWeight
}

// Name implements exec.Backend.
func (b *Backend) Name() string { return "cuda" }

// Device describes the GPU (name, compute capability, multiprocessors).
func (b *Backend) Device() string {
	return fmt.Sprintf("%s (sm_%d, %d SMs)", b.dev.name, b.dev.arch, b.dev.sms)
}

// deviceWeight is a weight in device memory, contiguous (strided stacks are packed on
// upload).
type deviceWeight struct {
	w     kernels.Weight
	dtype graph.DType
	shape []int
	bytes int64
}

// Load implements exec.Backend.
func (b *Backend) Load(p *plan.Plan, weights func(string) (*ops.Tensor, error)) (exec.Program, error) {
	if err := checkOps(p); err != nil {
		return nil, err
	}
	prog := &program{b: b, p: p, bufs: make([]bufferAddr, len(p.Buffers)), logits: -1, tokensBuf: -1}
	err := b.dev.do(func() error {
		for _, buf := range p.Buffers {
			switch buf.Kind {
			case plan.Weight:
				w, err := b.weight(p, buf, weights)
				if err != nil {
					return err
				}
				prog.bufs[buf.ID] = bufferAddr{weight: w}
			case plan.Scratch, plan.Output:
				if buf.PerN != 0 {
					return fmt.Errorf("plan %s: %s buffer %s depends on the context capacity", p.Phase, buf.Kind, buf.Name)
				}
				addr, err := b.dev.alloc(buf.Bytes)
				if err != nil {
					return fmt.Errorf("plan %s: %s buffer %s: %w", p.Phase, buf.Kind, buf.Name, err)
				}
				prog.owned = append(prog.owned, addr)
				prog.bufs[buf.ID] = bufferAddr{addr: addr}
				if buf.Kind == plan.Output && buf.Name == "logits" {
					prog.logits = buf.ID
					prog.logitsHost = make([]byte, buf.Bytes)
				}
			case plan.Input:
				if buf.Name != "tokens" {
					return fmt.Errorf("plan %s: unknown input %q", p.Phase, buf.Name)
				}
				prog.tokensBuf = buf.ID
			case plan.State:
			default:
				return fmt.Errorf("plan %s: buffer %s has unknown kind %q", p.Phase, buf.Name, buf.Kind)
			}
		}
		if prog.tokensBuf < 0 {
			return fmt.Errorf("plan %s has no tokens input", p.Phase)
		}
		if prog.logits < 0 {
			return fmt.Errorf("plan %s has no logits output", p.Phase)
		}
		// The step buffer: C, T, N, pad, then the T token ids (the tokens input).
		steps, err := b.dev.alloc(int64(16 + 4*p.Tokens))
		if err != nil {
			return err
		}
		prog.owned = append(prog.owned, steps)
		prog.steps = steps
		prog.bufs[prog.tokensBuf] = bufferAddr{addr: steps + 16}
		return nil
	})
	if err != nil {
		prog.release()
		return nil, err
	}
	prog.vocab = embedVocab(p)
	// Lower once without a state to catch shape errors at Load rather than at the first
	// step; the launches are rebuilt when a session's state is bound.
	if err := b.dev.do(func() error { _, err := prog.lower(nil, prog.steps); return err }); err != nil {
		prog.release()
		return nil, err
	}
	return prog, nil
}

// weight uploads a plan's weight buffer, or returns the copy another plan uploaded.
func (b *Backend) weight(p *plan.Plan, buf plan.Buffer, weights func(string) (*ops.Tensor, error)) (*deviceWeight, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w, ok := b.weights[buf.Name]; ok {
		if w.dtype != buf.Type.DType {
			return nil, fmt.Errorf("plan %s: weight %s was uploaded as %s but the plan wants %s", p.Phase, buf.Name, w.dtype, buf.Type.DType)
		}
		return w, nil
	}
	t, err := weights(buf.Name)
	if err != nil {
		return nil, fmt.Errorf("plan %s: weight %s: %w", p.Phase, buf.Name, err)
	}
	if t.DType != buf.Type.DType {
		return nil, fmt.Errorf("plan %s: weight %s is %s in the checkpoint but the plan was compiled for %s", p.Phase, buf.Name, t.DType, buf.Type.DType)
	}
	w, err := b.upload(buf.Name, t)
	if err != nil {
		return nil, fmt.Errorf("plan %s: upload weight %s: %w", p.Phase, buf.Name, err)
	}
	b.weights[buf.Name] = w
	return w, nil
}

// upload copies a weight to the device, packing a strided stack (Stride0) contiguous.
func (b *Backend) upload(name string, t *ops.Tensor) (*deviceWeight, error) {
	dt, err := gpu.DTypeCode(t.DType)
	if err != nil {
		return nil, err
	}
	elems := int64(t.Elements())
	dataBytes := elems * int64(t.DType.Bits()) / 8
	w := &deviceWeight{dtype: t.DType, shape: append([]int(nil), t.Shape...), w: kernels.Weight{DType: dt, Group: int32(t.Group)}}
	data, scales, biases := t.Data, t.Scales, t.Biases
	groups := int64(0)
	if t.DType.Quantized() {
		if t.Group <= 0 || t.Group%8 != 0 {
			return nil, fmt.Errorf("quantization group %d is not a positive multiple of 8", t.Group)
		}
		groups = elems / int64(t.Group)
	}
	if t.Stride0 != 0 && len(t.Shape) > 0 && t.Shape[0] > 0 {
		slices := int64(t.Shape[0])
		data = packSlices(t.Data, slices, dataBytes/slices, int64(t.Stride0))
		if t.DType.Quantized() {
			gs := groups / slices
			scales = packSlices(t.Scales, slices, 2*gs, 2*int64(t.Stride0Groups))
			biases = packSlices(t.Biases, slices, 2*gs, 2*int64(t.Stride0Groups))
		}
	}
	if int64(len(data)) < dataBytes {
		return nil, fmt.Errorf("%s has %d bytes of data, its shape %v needs %d", name, len(data), t.Shape, dataBytes)
	}
	put := func(src []byte, n int64) (uint64, error) {
		addr, err := b.dev.alloc(n)
		if err != nil {
			return 0, err
		}
		return addr, b.dev.upload(addr, src[:n])
	}
	if w.w.Data, err = put(data, dataBytes); err != nil {
		return nil, err
	}
	w.bytes = dataBytes
	if t.DType.Quantized() {
		if int64(len(scales)) < 2*groups || int64(len(biases)) < 2*groups {
			return nil, fmt.Errorf("%s has %d/%d bytes of scales/biases, want %d", name, len(scales), len(biases), 2*groups)
		}
		if w.w.Scales, err = put(scales, 2*groups); err != nil {
			return nil, err
		}
		if w.w.Biases, err = put(biases, 2*groups); err != nil {
			return nil, err
		}
		w.bytes += 4 * groups
	}
	return w, nil
}

// packSlices copies n slices of size bytes, stride apart, into one contiguous buffer.
func packSlices(src []byte, n, size, stride int64) []byte {
	out := make([]byte, n*size)
	for i := int64(0); i < n; i++ {
		copy(out[i*size:(i+1)*size], src[i*stride:i*stride+size])
	}
	return out
}

// embedVocab is the vocabulary of the plan's embed table (0 when there is none), so Run
// can refuse out-of-range token ids before they reach the device.
func embedVocab(p *plan.Plan) int {
	for _, d := range p.Dispatches {
		if d.Op == "embed" && len(d.Args) > 0 && len(d.Args[0].Type.Shape) > 0 {
			if dim := d.Args[0].Type.Shape[0]; dim.IsConst() {
				return dim.Const
			}
		}
	}
	return 0
}

// checkOps refuses a plan that was not compiled for this backend, before touching the
// device: a CUDA plan names the kernel of every dispatch.
func checkOps(p *plan.Plan) error {
	if p.Backend != "cuda" {
		return fmt.Errorf("plan %s was compiled for backend %q, not cuda (compile with --backend cuda)", p.Phase, p.Backend)
	}
	for _, d := range p.Dispatches {
		if d.Kernel == "" {
			return fmt.Errorf("plan %s: dispatch %d (%s) names no kernel", p.Phase, d.Index, d.Op)
		}
	}
	return checkRouterQ8Order(p)
}

// programmaticEdges says whether graphs get programmatic edges: asked for, a Hopper or
// later device (griddepcontrol is sm_90 PTX; the prelude compiles it only there), and a
// driver with edge data.
func (b *Backend) programmaticEdges() bool {
	return b.programmatic && b.dev.arch >= 90 && b.dev.d.cuGraphAddDependencies != nil
}
