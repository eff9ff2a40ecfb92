// Package checkpoint opens a Qwen3.5/3.6 MoE checkpoint folder (config.json plus
// safetensors) in any of the three layouts users download, and presents its weights under
// the canonical names of contracts.md in one convention: quantized weights as MLX affine
// Q4/Q8, zero-centred norms as 1+w, conv1d as [C,K], experts stacked, A_log in F32. The
// conversions are the named Transforms; everything else is the mapped file bytes.
package checkpoint

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
)

// Checkpoint is an open checkpoint. Tensors it returns alias read-only maps (or, for
// copying transforms, memory it owns) and stay valid until Close.
type Checkpoint struct {
	dir    string
	cfg    *qwen35moe.Config
	set    *safetensors.Set
	layout Layout
	shapes map[string][]int // canonical name -> logical shape from the config

	mu    sync.Mutex
	cache map[string]*ops.Tensor
}

// Open reads dir/config.json and the safetensors of dir, detects the layout from the
// tensor names, and cross-checks it against the conv1d shape.
func Open(dir string) (*Checkpoint, error) {
	cfg, err := qwen35moe.LoadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	layout, err := detectLayout(set.Names())
	if err != nil {
		set.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	if err := checkConfigAgainstTensors(cfg, set, layout); err != nil {
		set.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	c := &Checkpoint{dir: dir, cfg: cfg, set: set, layout: layout, shapes: map[string][]int{}, cache: map[string]*ops.Tensor{}}
	for _, w := range qwen35moe.Weights(cfg) {
		c.shapes[w.Name] = w.Shape
	}
	if err := c.crossCheckConv(); err != nil {
		set.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	return c, nil
}

// checkConfigAgainstTensors compares the sizes everything else is built from (layer
// count, hidden size, vocabulary) with the tensors the files hold, before any of them is
// used: a config that lies about them is refused here, with the evidence, instead of
// sizing a graph and a session for a model that is not there. Bind checks every tensor's
// shape later; this only makes sure the config's scale is the checkpoint's.
func checkConfigAgainstTensors(cfg *qwen35moe.Config, set *safetensors.Set, layout Layout) error {
	prefix := layout.modulePrefix()
	layers := 0
	for _, name := range set.Names() {
		rest, ok := strings.CutPrefix(name, prefix+"layers.")
		if !ok {
			continue
		}
		digits, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(digits); err == nil && n >= 0 && n < 1<<20 {
			layers = max(layers, n+1)
		}
	}
	if layers != cfg.NumLayers {
		return fmt.Errorf("config.json says num_hidden_layers = %d but the tensors hold %d layers", cfg.NumLayers, layers)
	}
	embed := prefix + "embed_tokens.weight"
	if t, f, ok := set.Info(embed); ok && (len(t.Shape) != 2 || t.Shape[0] != cfg.VocabSize) {
		return fmt.Errorf("config.json says vocab_size = %d but %s (in %s) has shape %v", cfg.VocabSize, embed, f.Path, t.Shape)
	}
	norm := prefix + "layers.0.input_layernorm.weight"
	if t, f, ok := set.Info(norm); ok && (len(t.Shape) != 1 || t.Shape[0] != cfg.HiddenSize) {
		return fmt.Errorf("config.json says hidden_size = %d but %s (in %s) has shape %v", cfg.HiddenSize, norm, f.Path, t.Shape)
	}
	return nil
}

// crossCheckConv is the documented shape cross-check (model-spec §2.2): HF stores conv1d
// [C,1,K] and unshifted norms, MLX [C,K,1] and norms with +1 baked in. Names decide the
// layout; a conv shape of the other convention means the names lie about the norms, and
// guessing either way would silently corrupt the model.
func (c *Checkpoint) crossCheckConv() error {
	for i, kind := range c.cfg.Layers {
		if kind != qwen35moe.LinearAttention {
			continue
		}
		name := fmt.Sprintf("%slayers.%d.linear_attn.conv1d.weight", c.layout.modulePrefix(), i)
		t, f, ok := c.set.Info(name)
		if !ok || len(t.Shape) != 3 || t.Shape[1] == t.Shape[2] {
			return nil // missing or malformed: Bind reports it with the rest
		}
		if mlxShaped := t.Shape[2] == 1; mlxShaped != (c.layout == MLX) {
			return fmt.Errorf("tensor names say %s layout but %s (in %s) has shape %v, the other layout's conv convention; "+
				"refusing to guess whether the norms carry +1", c.layout, name, f.Path, t.Shape)
		}
		return nil
	}
	return nil
}

// Config is the parsed config.json (and generation_config.json).
func (c *Checkpoint) Config() *qwen35moe.Config { return c.cfg }

// Layout is the layout detected from the tensor names.
func (c *Checkpoint) Layout() Layout { return c.layout }

// Dir is the folder the checkpoint was opened from.
func (c *Checkpoint) Dir() string { return c.dir }

// SettleHugePages maps the checkpoint's files in and has the page cache hold them in
// 2 MiB pages where it can (safetensors.Set.SettleHugePages, which tells rereading how a
// file's reread goes); tensors stay valid.
func (c *Checkpoint) SettleHugePages(rereading func(path string, done, total int64)) ([]safetensors.PageCacheReport, error) {
	return c.set.SettleHugePages(rereading)
}

// Close unmaps the files; tensors returned earlier are invalid afterwards.
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	c.cache = map[string]*ops.Tensor{}
	c.mu.Unlock()
	return c.set.Close()
}

// WeightType is the graph type of a canonical weight: its stored dtype (Q4/Q8 with the
// group for quantized modules, F32 for transformed norms and A_log) and its logical
// shape, which must equal the shape the graph builder declares.
func (c *Checkpoint) WeightType(name string, logical graph.Shape) (graph.Type, error) {
	b, err := c.resolve(name)
	if err != nil {
		return graph.Type{}, fmt.Errorf("checkpoint %s: %w", c.dir, err)
	}
	if !logical.Equal(b.typ.Shape) {
		return graph.Type{}, fmt.Errorf("checkpoint %s: weight %s is %s in the checkpoint but the graph declares %s", c.dir, name, b.typ.Shape, logical)
	}
	return b.typ, nil
}

// Tensor returns a canonical weight, transformed and mapped.
func (c *Checkpoint) Tensor(name string) (*ops.Tensor, error) {
	t, _, err := c.tensor(name)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.dir, err)
	}
	return t, nil
}

func (c *Checkpoint) tensor(name string) (*ops.Tensor, *binding, error) {
	b, err := c.resolve(name)
	if err != nil {
		return nil, b, err // b, when set, names the stored tensors so Bind does not call them unused
	}
	c.mu.Lock()
	t, ok := c.cache[name]
	c.mu.Unlock()
	if ok {
		return t, b, nil
	}
	t, err = b.build()
	if err != nil {
		return nil, b, fmt.Errorf("%s (%s of %s): %w", name, b.transform, strings.Join(b.stored, ", "), err)
	}
	c.mu.Lock()
	c.cache[name] = t
	c.mu.Unlock()
	return t, b, nil
}

// BindError lists everything wrong with binding a checkpoint to a weight list at once.
type BindError struct {
	Dir      string
	Layout   Layout
	Missing  []string // "canonical: expected stored names"
	Unused   []string // stored tensors no bound weight consumed (ignored ones excluded)
	Problems []string // present but wrong: shape, dtype, quantization
}

func (e *BindError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "checkpoint %s (%s layout): %d missing, %d unused, %d invalid tensor(s)",
		e.Dir, e.Layout, len(e.Missing), len(e.Unused), len(e.Problems))
	for _, m := range e.Missing {
		sb.WriteString("\n  missing " + m)
	}
	for _, u := range e.Unused {
		sb.WriteString("\n  unused  " + u)
	}
	for _, p := range e.Problems {
		sb.WriteString("\n  invalid " + p)
	}
	return sb.String()
}

// Bind returns every named weight, or one *BindError listing every missing weight, every
// stored tensor left unused (vision and MTP tensors are ignored, see Ignored) and every
// weight present in the wrong shape or dtype.
func (c *Checkpoint) Bind(names []string) (map[string]*ops.Tensor, error) {
	out := make(map[string]*ops.Tensor, len(names))
	used := map[string]bool{}
	be := &BindError{Dir: c.dir, Layout: c.layout}
	for _, name := range names {
		t, b, err := c.tensor(name)
		if b != nil {
			for _, s := range b.stored {
				used[s] = true
			}
		}
		var miss *missingError
		switch {
		case errors.As(err, &miss):
			be.Missing = append(be.Missing, miss.Error())
			for _, s := range miss.present {
				used[s] = true
			}
		case err != nil:
			be.Problems = append(be.Problems, err.Error())
		default:
			out[name] = t
		}
	}
	for _, s := range c.set.Names() {
		if !used[s] && !Ignored(s) {
			info, f, _ := c.set.Info(s)
			be.Unused = append(be.Unused, fmt.Sprintf("%s %s %v (in %s)", s, info.DType, info.Shape, f.Path))
		}
	}
	if len(be.Missing)+len(be.Unused)+len(be.Problems) > 0 {
		sort.Strings(be.Missing)
		return nil, be
	}
	return out, nil
}
