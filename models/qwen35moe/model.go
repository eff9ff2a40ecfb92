package qwen35moe

import (
	"fmt"
	"math"

	"pistil/graph"
	"pistil/ops"
)

// BuildOptions choose the variants of the declared graph; the zero value is the GPU
// default (MLX 4-bit weight types from the config, BF16 KV and conv state, last-token
// logits, recurrent delta rule).
type BuildOptions struct {
	// WeightType gives each canonical weight its graph type (a checkpoint's
	// WeightType); nil means MLXWeightType(cfg).
	WeightType func(name string, logical graph.Shape) (graph.Type, error)
	// KVDType and ConvStateDType are the storage types of the KV cache and the conv
	// state; the zero value means BF16.
	KVDType, ConvStateDType graph.DType
	// AllLogits outputs logits for every token ([T,V]); otherwise only for the last ([1,V]).
	AllLogits bool
	// Hidden also outputs hidden.{k} F32 [T,H]: k=0 the embeddings, k=1..L-1 the output
	// of layer k-1, k=L the final-norm output (the golden reference's hidden.K).
	Hidden bool
	// DeltaRule is the gated_delta form: "recurrent" (default) or "chunked".
	DeltaRule string
}

// deltaChunk is the chunk length of the chunked delta rule (model-spec.md §2.6).
const deltaChunk = 64

// Build declares the text model as a graph over symbolic T (tokens this step), C (context
// before the step) and N (cache capacity). It runs nothing.
//
// Inputs: "tokens" I32 [T]. Outputs: "logits", optionally "hidden.{k}", and every state's
// final version under the state's name (layers.{i}.k_cache, v_cache, conv_state,
// recurrent_state).
func Build(cfg *Config, opts BuildOptions) (*graph.Graph, error) {
	if cfg == nil {
		return nil, fmt.Errorf("qwen35moe.Build: nil config")
	}
	if opts.WeightType == nil {
		opts.WeightType = MLXWeightType(cfg)
	}
	if opts.KVDType == graph.InvalidDType {
		opts.KVDType = graph.BF16
	}
	if opts.ConvStateDType == graph.InvalidDType {
		opts.ConvStateDType = graph.BF16
	}
	for _, st := range []struct {
		what string
		dt   graph.DType
	}{{"KVDType", opts.KVDType}, {"ConvStateDType", opts.ConvStateDType}} {
		if st.dt != graph.F32 && st.dt != graph.BF16 {
			return nil, fmt.Errorf("qwen35moe.Build: %s %s: want f32 or bf16", st.what, st.dt)
		}
	}
	switch opts.DeltaRule {
	case "":
		opts.DeltaRule = "recurrent"
	case "recurrent", "chunked":
	default:
		return nil, fmt.Errorf("qwen35moe.Build: DeltaRule %q: want recurrent or chunked", opts.DeltaRule)
	}
	if len(cfg.Layers) != cfg.NumLayers {
		return nil, fmt.Errorf("qwen35moe.Build: config has %d layer kinds for %d layers", len(cfg.Layers), cfg.NumLayers)
	}

	m := &modelBuilder{cfg: cfg, opts: opts, b: graph.NewBuilder(graph.New("qwen35moe"), ops.Default)}
	m.declare()
	if m.err != nil {
		return nil, fmt.Errorf("qwen35moe.Build: %w", m.err)
	}
	if err := m.b.Err(); err != nil {
		return nil, fmt.Errorf("qwen35moe.Build: %w", err)
	}
	return m.b.G, nil
}

// modelBuilder carries what every block declaration needs.
type modelBuilder struct {
	cfg  *Config
	opts BuildOptions
	b    *graph.Builder
	err  error // first weight-type error; the graph builder records its own
}

// declare is the top level of model-spec.md §2.1.
func (m *modelBuilder) declare() {
	cfg, b := m.cfg, m.b
	tokens := b.Source("input", "tokens", graph.TensorType(graph.I32, graph.T), nil)
	x := b.Named("embed", "embed", nil, m.weight("embed_tokens", cfg.VocabSize, cfg.HiddenSize), tokens)
	hidden := []*graph.Value{x}
	var states []graph.Output
	for i, kind := range cfg.Layers {
		l := layer{m: m, i: i, prefix: fmt.Sprintf("layers.%d.", i)}
		h := m.rmsNorm(x, l.prefix+"input_layernorm", cfg.HiddenSize)
		var mixed *graph.Value
		if kind == FullAttention {
			mixed = l.attention(h)
		} else {
			mixed = l.deltaNet(h)
		}
		x = b.Named("add", l.prefix+"attn_residual", nil, x, mixed)
		h = m.rmsNorm(x, l.prefix+"post_attention_layernorm", cfg.HiddenSize)
		x = b.Named("add", l.prefix+"mlp_residual", nil, x, l.moe(h))
		states = append(states, l.states...)
		if i < cfg.NumLayers-1 {
			hidden = append(hidden, x)
		}
	}
	x = m.rmsNorm(x, "norm", cfg.HiddenSize)
	hidden = append(hidden, x)
	if !m.opts.AllLogits {
		x = b.Named("last_row", "last_token", nil, x)
	}
	b.G.AddOutput("logits", m.linear(x, "lm_head", cfg.VocabSize, cfg.HiddenSize))
	if m.opts.Hidden {
		for k, h := range hidden {
			b.G.AddOutput(fmt.Sprintf("hidden.%d", k), h)
		}
	}
	b.G.Outputs = append(b.G.Outputs, states...)
}

// weight declares a canonical weight with its logical shape; its dtype comes from the
// WeightType option.
func (m *modelBuilder) weight(name string, shape ...int) *graph.Value {
	logical := graph.S(shape...)
	t, err := m.opts.WeightType(name, logical)
	if err == nil && !t.Shape.Equal(logical) {
		err = fmt.Errorf("weight %s: type %s does not have the declared shape %s", name, t, logical)
	}
	if err != nil {
		if m.err == nil {
			m.err = err
		}
		return &graph.Value{ID: -1, Op: "weight", Name: name}
	}
	return m.b.Source("weight", name, t, nil)
}

// state declares a session state buffer.
func (m *modelBuilder) state(name string, t graph.Type) *graph.Value {
	return m.b.Source("state", name, t, nil)
}

// linear is y = x·Wᵀ for a weight [out, in]. A quantized weight is declared as dequant +
// matmul; the fuse-dequant pass turns the pair into qmatmul.
func (m *modelBuilder) linear(x *graph.Value, name string, out, in int) *graph.Value {
	w := m.weight(name, out, in)
	if w.Type.DType.Quantized() {
		w = m.b.Op("dequant", nil, w)
	}
	return m.b.Named("matmul", name, nil, x, w)
}

// rmsNorm normalizes over the last dimension with a weight [width] as the loader presents
// it (1+w already applied for the zero-centred norms).
func (m *modelBuilder) rmsNorm(x *graph.Value, name string, width int) *graph.Value {
	return m.b.Named("rms_norm", name, graph.Attrs{"eps": m.cfg.RMSNormEps}, x, m.weight(name, width))
}

// reshape views x with a new shape.
func (m *modelBuilder) reshape(x *graph.Value, label string, dims ...graph.Dim) *graph.Value {
	return m.b.Named("reshape", label, graph.Attrs{"shape": graph.Shape(dims).String()}, x)
}

// slice copies [start, end) of x along axis.
func (m *modelBuilder) slice(x *graph.Value, label string, axis, start, end int) *graph.Value {
	return m.b.Named("slice", label, graph.Attrs{"axis": int64(axis), "start": int64(start), "end": int64(end)}, x)
}

// layer is one decoder layer being declared; it collects its state outputs.
type layer struct {
	m      *modelBuilder
	i      int
	prefix string
	states []graph.Output
}

// newState declares a state and returns it; final records its last version as an output.
func (l *layer) newState(name string, t graph.Type) *graph.Value {
	return l.m.state(l.prefix+name, t)
}

func (l *layer) final(name string, v *graph.Value) {
	l.states = append(l.states, graph.Output{Name: l.prefix + name, Value: v})
}

// invSqrt is 1/√n as an attribute value.
func invSqrt(n int) float64 { return 1 / math.Sqrt(float64(n)) }

// dims is shorthand for constant dimensions after a leading T.
func tDims(rest ...int) []graph.Dim {
	out := []graph.Dim{graph.T}
	for _, n := range rest {
		out = append(out, graph.D(n))
	}
	return out
}
