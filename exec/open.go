package exec

import (
	"fmt"
	"path/filepath"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// Open loads the checkpoint in dir and prepares it to run on the chosen backend. The
// graph is declared once with the checkpoint's weight types; plans are compiled per token
// count on first use.
func Open(dir string, o Options) (*Model, error) {
	if o.Backend == "" {
		o.Backend = "cpu"
	}
	switch o.Kernels {
	case "", "fast", "reference":
	default:
		return nil, fmt.Errorf("kernels %q: want \"fast\" or \"reference\"", o.Kernels)
	}
	chunk := o.Chunk
	if chunk == 0 {
		chunk = DefaultChunk
	}
	if chunk <= 0 {
		return nil, fmt.Errorf("prefill chunk %d must be positive", chunk)
	}
	backend, err := NewBackend(o.Backend, BackendOptions{Workers: o.Workers, Kernels: o.Kernels, Graphs: o.Graphs})
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		backend.Close()
		return nil, err
	}
	cfg := ck.Config()
	// The CPU keeps the KV cache and the conv state in float32, so its answers match the
	// float32 references to rounding; GPU backends will store them in bf16.
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{
		WeightType: ck.WeightType, KVDType: graph.F32, ConvStateDType: graph.F32, AllLogits: o.AllLogits,
	})
	if err != nil {
		backend.Close()
		ck.Close()
		return nil, fmt.Errorf("declare the model graph: %w", err)
	}
	// Bind every weight up front so a checkpoint that lacks a tensor, or has one the model
	// does not use, fails here with the full list rather than at the first step.
	if _, err := ck.Bind(qwen35moe.WeightNames(cfg)); err != nil {
		backend.Close()
		ck.Close()
		return nil, err
	}
	m := &Model{
		name: filepath.Base(filepath.Clean(dir)), cfg: cfg, opts: o, backend: backend, weights: ck,
		chunk: chunk, programs: map[int]Program{},
	}
	for _, v := range g.Values {
		if v.Op == "state" {
			m.states = append(m.states, StateSpec{Name: v.Name, Type: v.Type})
		}
	}
	m.compile = func(tokens int) (*plan.Plan, error) {
		phase := passes.Phase{Name: "prefill", Tokens: tokens, LastLogitsOnly: !o.AllLogits}
		if tokens == 1 {
			phase.Name = "decode"
		}
		return passes.Compile(g, ops.Default, phase, o.Passes)
	}
	// The decode plan and the full prefill chunk are the ones every session uses: compile
	// them now so the first request does not pay for it (and a plan that cannot be
	// compiled or loaded fails Open, not a request). Remainder pieces compile on first use.
	for _, tokens := range []int{1, chunk} {
		if _, err := m.program(tokens); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}
