package passes_test

import (
	"fmt"
	"math"
	"math/rand"
	"pistil/internal/fixtures"
	"testing"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// The meaning tests run real numbers: the tiny golden checkpoints (MLX 4-bit and
// Hugging Face bf16), random token ids, and the op references. A pass must not change
// what the graph computes, and a plan executed dispatch by dispatch over its planned
// buffers must compute what the graph computes.

var goldenDir = (fixtures.Path("golden/tiny-s1") + "/")

func openTiny(t *testing.T, layout string) *checkpoint.Checkpoint {
	t.Helper()
	ck, err := checkpoint.Open(goldenDir + layout)
	if err != nil {
		t.Fatalf("open tiny %s checkpoint: %v", layout, err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

func buildTiny(t *testing.T, ck *checkpoint.Checkpoint, allLogits bool, hidden ...bool) *graph.Graph {
	t.Helper()
	g, err := qwen35moe.Build(ck.Config(), qwen35moe.BuildOptions{
		WeightType: ck.WeightType, KVDType: graph.F32, ConvStateDType: graph.F32, AllLogits: allLogits,
		Hidden: len(hidden) > 0 && hidden[0],
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// zeroStates makes a fresh session state for every state source of g.
func zeroStates(g *graph.Graph, bind graph.Bindings) map[string]*ops.Tensor {
	st := map[string]*ops.Tensor{}
	for _, v := range g.Values {
		if v.Op == graph.OpState {
			st[v.Name] = ops.NewTensor(v.Type.DType, v.Type.Shape.Eval(bind)...)
		}
	}
	return st
}

func randomTokens(rng *rand.Rand, n, vocab int) *ops.Tensor {
	tok := ops.NewTensor(graph.I32, n)
	for i := range tok.I32() {
		tok.I32()[i] = int32(rng.Intn(vocab))
	}
	return tok
}

// interpret runs g with ops.Run from the given state (copied, never written).
func interpret(t *testing.T, g *graph.Graph, ck *checkpoint.Checkpoint, tokens *ops.Tensor, states map[string]*ops.Tensor, bind graph.Bindings) map[string]*ops.Tensor {
	t.Helper()
	out, err := ops.Run(g, &ops.Env{Bind: bind, Workers: 2}, func(v *graph.Value) (*ops.Tensor, error) {
		switch v.Op {
		case graph.OpWeight:
			return ck.Tensor(v.Name)
		case graph.OpState:
			return copyTensor(states[v.Name]), nil
		case graph.OpInput:
			return tokens, nil
		}
		return nil, fmt.Errorf("unknown source %s", v.Op)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func copyTensor(x *ops.Tensor) *ops.Tensor {
	c := *x
	c.Data = append([]byte(nil), x.Data...)
	return &c
}

// maxRelDiff compares two float tensors: the largest |a-b| / max(1, |b|).
func maxRelDiff(a, b *ops.Tensor) float64 {
	fa, fb := a.Elements(), b.Elements()
	if fa != fb {
		return math.Inf(1)
	}
	worst := 0.0
	for i := 0; i < fa; i++ {
		x, y := float64(a.Float(i)), float64(b.Float(i))
		worst = max(worst, math.Abs(x-y)/max(1, math.Abs(y)))
	}
	return worst
}

func compareOutputs(t *testing.T, what string, got, want map[string]*ops.Tensor, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("%s: output %s missing", what, name)
		}
		if d := maxRelDiff(g, w); d > tol {
			t.Errorf("%s: output %s differs by %g", what, name, d)
		}
	}
}

// runUntil applies the passes up to and including until, checking after each.
func runUntil(t *testing.T, g *graph.Graph, phase passes.Phase, cfg passes.Config, until string) *passes.Unit {
	t.Helper()
	cfg.Check = true
	u := &passes.Unit{Graph: g.Clone(), Phase: phase, Ops: ops.Default}
	if err := passes.Run(u, cfg, until); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFuseDequantKeepsTheAnswer runs the specialised graph before and after fuse-dequant
// on random tokens, for a 5-token prefill from an empty state, and compares every output
// (logits and all state).
func TestFuseDequantKeepsTheAnswer(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, true)
	phase := passes.Phase{Name: "prefill", Tokens: 5}
	before := runUntil(t, g, phase, passes.O0(), "specialise-phase")
	after := runUntil(t, g, phase, passes.Config{}, "fuse-dequant")
	if countOps(before.Graph, "dequant") == 0 {
		t.Fatal("the MLX tiny graph has no dequant: nothing to fuse")
	}
	if n := countOps(after.Graph, "dequant"); n != 0 {
		t.Errorf("%d dequant values left after fusion", n)
	}
	if countOps(after.Graph, "expert_qmatmul") == 0 || countOps(after.Graph, "qmatmul") == 0 {
		t.Error("fusion produced no qmatmul or no expert_qmatmul")
	}
	rng := rand.New(rand.NewSource(7))
	bind := graph.Bindings{T: 5, C: 0, N: 8}
	tokens := randomTokens(rng, 5, ck.Config().VocabSize)
	states := zeroStates(g, bind)
	// The fused op accumulates per quantization group, so it rounds differently from the
	// dequantized f32 matmul: float32 rounding, not a different function.
	compareOutputs(t, "fuse-dequant", interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 1e-4)
}

// TestReorderKeepsTheAnswer runs the fused graph before and after reorder: the same ops
// in another topological order must give identical numbers.
func TestReorderKeepsTheAnswer(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, true)
	phase := passes.Phase{Name: "prefill", Tokens: 3}
	before := runUntil(t, g, phase, passes.Config{}, "fuse-dequant")
	after := runUntil(t, g, phase, passes.Config{}, "reorder")
	if after.Stats["reorder: values moved"] == 0 {
		t.Fatal("reorder moved nothing: the test would not see a wrong order")
	}
	rng := rand.New(rand.NewSource(5))
	bind := graph.Bindings{T: 3, C: 0, N: 8}
	tokens := randomTokens(rng, 3, ck.Config().VocabSize)
	states := zeroStates(g, bind)
	compareOutputs(t, "reorder", interpret(t, after.Graph, ck, tokens, states, bind), interpret(t, before.Graph, ck, tokens, states, bind), 0)
}

// TestSliceViewsKeepTheAnswer: the decode graph with its contiguous slices as views (the
// GDN value heads, one per linear-attention layer) computes exactly what it computes with
// copies; a prefill step's slices (several rows, not contiguous) stay copies. The plans'
// placement of the views is TestPlansComputeTheGraph's (the default passes).
func TestSliceViewsKeepTheAnswer(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, true)
	gdn := linearAttentionLayers(ck)
	decode := passes.Phase{Name: "decode", Tokens: 1}
	views := runUntil(t, g, decode, passes.Config{}, "slice-views")
	copies := runUntil(t, g, decode, passes.Config{Off: map[string]bool{"slice-views": true}}, "slice-views")
	if gdn == 0 || countOps(views.Graph, "slice_view") != gdn || countOps(copies.Graph, "slice_view") != 0 {
		t.Fatalf("decode: %d slice_views with the pass, %d without; want one per linear-attention layer (%d), then none",
			countOps(views.Graph, "slice_view"), countOps(copies.Graph, "slice_view"), gdn)
	}
	if n, m := countOps(views.Graph, "slice"), countOps(copies.Graph, "slice"); m-n != gdn {
		t.Errorf("decode: %d slices left of %d, want %d fewer", n, m, gdn)
	}
	rng := rand.New(rand.NewSource(9))
	bind := graph.Bindings{T: 1, C: 3, N: 8}
	tokens := randomTokens(rng, 1, ck.Config().VocabSize)
	states := zeroStates(g, bind)
	compareOutputs(t, "slice-views", interpret(t, views.Graph, ck, tokens, states, bind), interpret(t, copies.Graph, ck, tokens, states, bind), 0)

	prefill := runUntil(t, g, passes.Phase{Name: "prefill", Tokens: 5}, passes.Config{}, "slice-views")
	if n := countOps(prefill.Graph, "slice_view"); n != 0 {
		t.Errorf("prefill of 5 tokens: %d slice_views, want none (its slices span 5 rows)", n)
	}
}

// linearAttentionLayers counts the checkpoint's Gated DeltaNet layers.
func linearAttentionLayers(ck *checkpoint.Checkpoint) int {
	n := 0
	for _, kind := range ck.Config().Layers {
		if kind == qwen35moe.LinearAttention {
			n++
		}
	}
	return n
}

// TestSpecialiseLastRowKeepsTheAnswer: dropping all but the last row of logits in prefill
// keeps that row and every state.
func TestSpecialiseLastRowKeepsTheAnswer(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, true)
	all := runUntil(t, g, passes.Phase{Name: "prefill", Tokens: 4}, passes.O0(), "specialise-phase")
	last := runUntil(t, g, passes.Phase{Name: "prefill", Tokens: 4, LastLogitsOnly: true}, passes.O0(), "specialise-phase")
	if got := last.Graph.Output("logits").Type.String(); got != fmt.Sprintf("f32[1,%d]", ck.Config().VocabSize) {
		t.Fatalf("last-row logits type %s", got)
	}
	rng := rand.New(rand.NewSource(3))
	bind := graph.Bindings{T: 4, C: 0, N: 8}
	tokens := randomTokens(rng, 4, ck.Config().VocabSize)
	states := zeroStates(g, bind)
	a := interpret(t, all.Graph, ck, tokens, states, bind)
	b := interpret(t, last.Graph, ck, tokens, states, bind)
	V := ck.Config().VocabSize
	lastRow := ops.FromF32(a["logits"].F32()[3*V:], 1, V)
	if d := maxRelDiff(b["logits"], lastRow); d > 1e-6 {
		t.Errorf("last-row logits differ from row 3 of all logits by %g", d)
	}
	delete(a, "logits")
	delete(b, "logits")
	compareOutputs(t, "last-row states", b, a, 0)
}

func countOps(g *graph.Graph, op string) int {
	n := 0
	for _, v := range g.Values {
		if v.Op == op {
			n++
		}
	}
	return n
}

// executor runs a plan dispatch by dispatch, in order, over its buffers: the plan's
// meaning, independent of any backend.
type executor struct {
	p       *plan.Plan
	arena   []byte
	outputs map[int][]byte
	weights map[int]*ops.Tensor
}

func newExecutor(t *testing.T, p *plan.Plan, ck *checkpoint.Checkpoint) *executor {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	e := &executor{p: p, outputs: map[int][]byte{}, weights: map[int]*ops.Tensor{}}
	for _, b := range p.Buffers {
		switch b.Kind {
		case plan.Scratch:
			e.arena = make([]byte, b.Bytes)
		case plan.Output:
			e.outputs[b.ID] = make([]byte, b.Bytes)
		case plan.Weight:
			w, err := ck.Tensor(b.Name)
			if err != nil {
				t.Fatal(err)
			}
			e.weights[b.ID] = w
		}
	}
	return e
}

// Orders in which the executor may run a plan's dispatches. Every one must give the
// plan's answer: members of a concurrent group may run in any order (so reversing each
// group tests the barriers), and any topological order of the reduced DAG is a legal
// schedule (so a random one tests the edges).
const (
	listOrder = iota
	groupsReversed
	randomTopological
)

func (e *executor) order(how int, rng *rand.Rand) []int {
	n := len(e.p.Dispatches)
	var out []int
	switch how {
	case listOrder:
		for i := 0; i < n; i++ {
			out = append(out, i)
		}
	case groupsReversed:
		for _, g := range e.p.Groups {
			for i := g.Last; i >= g.First; i-- {
				out = append(out, i)
			}
		}
	case randomTopological:
		indeg := make([]int, n)
		succ := make([][]int, n)
		for _, ed := range e.p.Edges {
			indeg[ed.To]++
			succ[ed.From] = append(succ[ed.From], ed.To)
		}
		var ready []int
		for i := 0; i < n; i++ {
			if indeg[i] == 0 {
				ready = append(ready, i)
			}
		}
		for len(ready) > 0 {
			k := rng.Intn(len(ready))
			d := ready[k]
			ready[k] = ready[len(ready)-1]
			ready = ready[:len(ready)-1]
			out = append(out, d)
			for _, s := range succ[d] {
				if indeg[s]--; indeg[s] == 0 {
					ready = append(ready, s)
				}
			}
		}
	}
	return out
}

func (e *executor) run(t *testing.T, tokens *ops.Tensor, states map[string]*ops.Tensor, bind graph.Bindings) map[string]*ops.Tensor {
	return e.runInOrder(t, tokens, states, bind, e.order(listOrder, nil))
}

func (e *executor) runInOrder(t *testing.T, tokens *ops.Tensor, states map[string]*ops.Tensor, bind graph.Bindings, order []int) map[string]*ops.Tensor {
	t.Helper()
	operand := func(o plan.Operand) *ops.Tensor {
		b := e.p.Buffers[o.Buffer]
		switch b.Kind {
		case plan.Weight:
			return e.weights[o.Buffer]
		case plan.Input:
			return tokens
		case plan.State:
			return states[b.Name]
		}
		data := e.arena
		if b.Kind == plan.Output {
			data = e.outputs[o.Buffer]
		}
		n := o.Type.Bytes(bind)
		return &ops.Tensor{DType: o.Type.DType, Shape: o.Type.Shape.Eval(bind), Data: data[o.Offset : o.Offset+n : o.Offset+n]}
	}
	env := &ops.Env{Bind: bind, Workers: 2}
	if len(order) != len(e.p.Dispatches) {
		t.Fatalf("order covers %d of %d dispatches", len(order), len(e.p.Dispatches))
	}
	for _, di := range order {
		d := e.p.Dispatches[di]
		info, _ := ops.Default.Info(d.Op)
		var in, out []*ops.Tensor
		for _, a := range d.Args {
			in = append(in, operand(a))
		}
		for _, r := range d.Results {
			out = append(out, operand(r))
		}
		if err := info.Ref(env, d.Stub(), in, out); err != nil {
			t.Fatalf("dispatch %d %s: %v", d.Index, d.Op, err)
		}
	}
	res := map[string]*ops.Tensor{}
	for id, data := range e.outputs {
		b := e.p.Buffers[id]
		res[b.Name] = &ops.Tensor{DType: b.Type.DType, Shape: b.Type.Shape.Eval(bind), Data: data}
	}
	for name, st := range states {
		res[name] = st
	}
	return res
}

// TestPlansComputeTheGraph compiles prefill (T=5) and decode (T=1) plans, with and
// without the optional passes, executes a prefill step then two decode steps over the
// planned buffers, and compares logits and every state with the interpreter on the
// graph. This is the meaning test of specialise-phase, plan-memory (aliasing, liveness,
// in-place state) and lower.
func TestPlansComputeTheGraph(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		ck := openTiny(t, layout)
		// The HF variant also outputs every layer's hidden state, which puts values that
		// later layers still read into output buffers.
		g := buildTiny(t, ck, false, layout == "hf")
		for _, o0 := range []bool{false, true} {
			cfg := passes.Config{Check: true}
			if o0 {
				cfg = passes.O0()
				cfg.Check = true
			}
			name := fmt.Sprintf("%s/O0=%v", layout, o0)
			t.Run(name, func(t *testing.T) {
				prefill, err := passes.Compile(g, ops.Default, passes.Phase{Name: "prefill", Tokens: 5, LastLogitsOnly: true}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				decode, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1}, cfg)
				if err != nil {
					t.Fatal(err)
				}
				for _, how := range []int{listOrder, groupsReversed, randomTopological} {
					checkPlanSteps(t, g, ck, cfg, prefill, decode, how)
				}
			})
		}
	}
}

// checkPlanSteps runs a prefill step then two decode steps, executing each plan's
// dispatches in the given order, and compares every step with the interpreter.
func checkPlanSteps(t *testing.T, g *graph.Graph, ck *checkpoint.Checkpoint, cfg passes.Config, prefill, decode *plan.Plan, how int) {
	t.Helper()
	rng := rand.New(rand.NewSource(11))
	orderRng := rand.New(rand.NewSource(int64(how)))
	const capacity = 8
	planStates := zeroStates(g, graph.Bindings{N: capacity})
	refStates := zeroStates(g, graph.Bindings{N: capacity})
	pos := 0
	for step, p := range []*plan.Plan{prefill, decode, decode} {
		bind := graph.Bindings{T: p.Tokens, C: pos, N: capacity}
		tokens := randomTokens(rng, p.Tokens, ck.Config().VocabSize)
		e := newExecutor(t, p, ck)
		got := e.runInOrder(t, tokens, planStates, bind, e.order(how, orderRng))
		// The reference is the graph after the passes that rewrite it (the last is
		// reorder; the later ones only analyse and lower): the plan must compute
		// exactly what that graph computes.
		ref := runUntil(t, g, passes.Phase{Name: p.Phase, Tokens: p.Tokens, LastLogitsOnly: true}, cfg, "reorder")
		want := interpret(t, ref.Graph, ck, tokens, refStates, bind)
		compareOutputs(t, fmt.Sprintf("order %d, step %d (%s)", how, step, p.Phase), got, want, 0)
		for name := range refStates {
			refStates[name] = want[name]
		}
		pos += p.Tokens
	}
}

// TestGPUPlansComputeTheGraph runs the GPU targets' plans (fused ops expanded where the
// target has no kernel, decode attention split into key ranges and merged) over their
// planned buffers with the op references, and compares each step with the CPU target's
// plan: expansion and splitting change rounding, never the answer.
func TestGPUPlansComputeTheGraph(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		ck := openTiny(t, layout)
		g := buildTiny(t, ck, false)
		for _, target := range []string{"cuda", "metal"} {
			for _, o0 := range []bool{false, true} {
				cfg := passes.Config{Check: true}
				if o0 {
					cfg = passes.O0()
					cfg.Check = true
				}
				t.Run(fmt.Sprintf("%s/%s/O0=%v", layout, target, o0), func(t *testing.T) {
					compile := func(backend, phase string, tokens int) *plan.Plan {
						p, err := passes.Compile(g, ops.Default, passes.Phase{Name: phase, Tokens: tokens, LastLogitsOnly: phase == "prefill", Backend: backend}, cfg)
						if err != nil {
							t.Fatal(err)
						}
						return p
					}
					const capacity, prompt = 40, 24
					gpuSteps := []*plan.Plan{compile(target, "prefill", prompt), compile(target, "decode", 1), compile(target, "decode", 1)}
					cpuSteps := []*plan.Plan{compile("cpu", "prefill", prompt), compile("cpu", "decode", 1), compile("cpu", "decode", 1)}
					if n := countPlanOps(gpuSteps[1], "attention_merge"); n == 0 && !o0 {
						t.Errorf("the %s decode plan has no split attention", target)
					}
					rng := rand.New(rand.NewSource(5))
					gpuStates := zeroStates(g, graph.Bindings{N: capacity})
					cpuStates := zeroStates(g, graph.Bindings{N: capacity})
					pos := 0
					for step := range gpuSteps {
						bind := graph.Bindings{T: gpuSteps[step].Tokens, C: pos, N: capacity}
						tokens := randomTokens(rng, gpuSteps[step].Tokens, ck.Config().VocabSize)
						got := newExecutor(t, gpuSteps[step], ck).run(t, tokens, gpuStates, bind)
						want := newExecutor(t, cpuSteps[step], ck).run(t, tokens, cpuStates, bind)
						compareOutputs(t, fmt.Sprintf("step %d (%s)", step, gpuSteps[step].Phase), got, want, 1e-4)
						for name := range cpuStates {
							gpuStates[name], cpuStates[name] = copyTensor(got[name]), copyTensor(want[name])
						}
						pos += gpuSteps[step].Tokens
					}
				})
			}
		}
	}
}

func countPlanOps(p *plan.Plan, op string) int {
	n := 0
	for _, d := range p.Dispatches {
		if d.Op == op {
			n++
		}
	}
	return n
}
