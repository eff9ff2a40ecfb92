package qwen35moe_test

import (
	"fmt"
	"math"
	"path/filepath"
	"pistil/internal/fixtures"
	"testing"

	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
	"pistil/passes"
)

// The golden tests run the declared graph through the op interpreter on the tiny random
// checkpoints made by transformers (../shared/golden/make_golden.py) and compare with its
// float32 logits and per-layer hidden states.

var goldenDirs = []string{fixtures.Path("golden/tiny-s1/hf"), fixtures.Path("golden/tiny-s1/mlx-q4")}

const (
	maxLogitErr = 2e-3
	genSteps    = 16
)

// reference is a golden reference.safetensors.
type reference struct {
	tokens, gen     []int32
	logits, genLogs []float32 // [S,V], [G,V]
	hidden          [][]float32
	vocab           int
}

func loadReference(t *testing.T, dir string, layers int) *reference {
	t.Helper()
	f, err := safetensors.Open(dir + "/reference.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func(name string) []byte {
		b, err := f.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), b...)
	}
	info, _ := f.Info("logits")
	ref := &reference{
		tokens:  (&ops.Tensor{DType: graph.I32, Data: read("tokens")}).I32(),
		gen:     (&ops.Tensor{DType: graph.I32, Data: read("gen_tokens")}).I32(),
		logits:  (&ops.Tensor{DType: graph.F32, Data: read("logits")}).F32(),
		genLogs: (&ops.Tensor{DType: graph.F32, Data: read("gen_logits")}).F32(),
		vocab:   info.Shape[1],
	}
	for k := 0; k <= layers; k++ {
		ref.hidden = append(ref.hidden, (&ops.Tensor{DType: graph.F32, Data: read(fmt.Sprintf("hidden.%d", k))}).F32())
	}
	return ref
}

// session holds a checkpoint, the graph and the states carried between steps.
type session struct {
	t      *testing.T
	ck     *checkpoint.Checkpoint
	cfg    *qwen35moe.Config
	g      *graph.Graph
	states map[string]*ops.Tensor
	weight map[string]*ops.Tensor
	n, c   int
}

func newSession(t *testing.T, dir string, opts qwen35moe.BuildOptions, capacity int) *session {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	opts.WeightType = ck.WeightType
	opts.KVDType, opts.ConvStateDType = graph.F32, graph.F32
	g, err := qwen35moe.Build(ck.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, ck: ck, cfg: ck.Config(), g: g, states: map[string]*ops.Tensor{}, weight: map[string]*ops.Tensor{}, n: capacity}
	for _, v := range g.Values {
		if v.Op == "state" {
			s.states[v.Name] = ops.NewTensor(v.Type.DType, v.Type.Shape.Eval(graph.Bindings{N: capacity})...)
		}
	}
	return s
}

// step runs the graph on tokens at position s.c, carries the states and returns outputs.
func (s *session) step(tokens []int32) map[string]*ops.Tensor {
	s.t.Helper()
	env := &ops.Env{Bind: graph.Bindings{T: len(tokens), C: s.c, N: s.n}, Workers: 2}
	ids := ops.NewTensor(graph.I32, len(tokens))
	copy(ids.I32(), tokens)
	source := func(v *graph.Value) (*ops.Tensor, error) {
		switch v.Op {
		case "input":
			return ids, nil
		case "state":
			return s.states[v.Name], nil
		}
		if w, ok := s.weight[v.Name]; ok {
			return w, nil
		}
		w, err := s.ck.Tensor(v.Name)
		s.weight[v.Name] = w
		return w, err
	}
	out, err := ops.Run(s.g, env, source)
	if err != nil {
		s.t.Fatal(err)
	}
	for name := range s.states {
		s.states[name] = out[name]
	}
	s.c += len(tokens)
	return out
}

// compareLogits checks got [rows,V] against want rows [from, from+rows) of a reference.
func compareLogits(t *testing.T, what string, got, want []float32, vocab int) {
	t.Helper()
	var worst float64
	mismatches := 0
	for r := 0; r < len(got)/vocab; r++ {
		g, w := got[r*vocab:(r+1)*vocab], want[r*vocab:(r+1)*vocab]
		for i := range g {
			worst = math.Max(worst, math.Abs(float64(g[i]-w[i])))
		}
		if argmax(g) != argmax(w) {
			mismatches++
		}
	}
	t.Logf("%s: max |logit error| %.3g over %d rows, %d argmax mismatches", what, worst, len(got)/vocab, mismatches)
	if worst >= maxLogitErr || mismatches > 0 {
		t.Errorf("%s: max |logit error| %.3g (limit %g), %d argmax mismatches", what, worst, maxLogitErr, mismatches)
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// TestGoldenPrompt runs the whole prompt in one step and checks logits at every position
// and every layer's hidden state, for both delta-rule forms.
func TestGoldenPrompt(t *testing.T) {
	for _, dir := range goldenDirs {
		for _, rule := range []string{"recurrent", "chunked"} {
			t.Run(filepath.Base(dir)+"/"+rule, func(t *testing.T) {
				s := newSession(t, dir, qwen35moe.BuildOptions{AllLogits: true, Hidden: true, DeltaRule: rule}, 96+genSteps)
				ref := loadReference(t, dir, s.cfg.NumLayers)
				out := s.step(ref.tokens)
				// Hidden-state drift per layer locates the op that goes wrong, if one does.
				for k, want := range ref.hidden {
					got := out[fmt.Sprintf("hidden.%d", k)].F32()
					scale := 0.0
					for _, v := range want {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
					d := maxAbsDiff(got, want)
					t.Logf("hidden.%d: max |error| %.3g (max |value| %.3g)", k, d, scale)
					if d > 1e-3*math.Max(scale, 1) {
						t.Errorf("hidden.%d drifts: max |error| %.3g", k, d)
					}
				}
				compareLogits(t, "prompt", out["logits"].F32(), ref.logits, ref.vocab)
			})
		}
	}
}

// TestGoldenChunksAndDecode prefills in chunks (7 + 89, then 32 + 32 + 32) carrying every
// state, then decodes the greedy continuation one token at a time with last-token logits:
// the state carry across steps, the T=1 path and the last_row output.
func TestGoldenChunksAndDecode(t *testing.T) {
	for _, dir := range goldenDirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var s *session
			var ref *reference
			var rest []float32
			for _, chunks := range [][]int{{32, 32, 32}, {7, 89}} {
				s = newSession(t, dir, qwen35moe.BuildOptions{AllLogits: true}, 96+genSteps)
				ref = loadReference(t, dir, s.cfg.NumLayers)
				pos := 0
				for _, n := range chunks {
					rest = s.step(ref.tokens[pos : pos+n])["logits"].F32()
					compareLogits(t, fmt.Sprintf("chunk %d..%d", pos, pos+n-1), rest, ref.logits[pos*ref.vocab:(pos+n)*ref.vocab], ref.vocab)
					pos += n
				}
			}
			V := ref.vocab
			// The last prompt row is gen_logits[0]; each fed token then yields the next.
			compareLogits(t, "gen 0", rest[len(rest)-V:], ref.genLogs[:V], V)
			dec := newSession(t, dir, qwen35moe.BuildOptions{}, 96+genSteps)
			dec.states, dec.c = s.states, s.c
			for i := 0; i+1 < len(ref.gen); i++ {
				got := dec.step(ref.gen[i : i+1])["logits"].F32()
				if argmax(got) != int(ref.gen[i+1]) {
					t.Errorf("decode step %d: argmax %d, greedy reference %d", i, argmax(got), ref.gen[i+1])
				}
				if d := maxAbsDiff(got, ref.genLogs[(i+1)*V:(i+2)*V]); d >= maxLogitErr {
					t.Errorf("decode step %d: max |logit error| %.3g", i, d)
				}
			}
		})
	}
}

// TestGoldenFused runs the mlx-q4 graph as the compiler leaves it after fuse-dequant (T
// bound to 96; qmatmul and expert_qmatmul read the packed weights directly) and checks
// the same logits.
func TestGoldenFused(t *testing.T) {
	dir := goldenDirs[1]
	s := newSession(t, dir, qwen35moe.BuildOptions{AllLogits: true}, 96)
	ref := loadReference(t, dir, s.cfg.NumLayers)
	u := &passes.Unit{Graph: s.g.Clone(), Phase: passes.Phase{Name: "prefill", Tokens: len(ref.tokens)}, Ops: ops.Default}
	if err := passes.Run(u, passes.Config{Check: true}, "fuse-dequant"); err != nil {
		t.Fatal(err)
	}
	fused := map[string]int{}
	for _, v := range u.Graph.Values {
		fused[v.Op]++
	}
	if fused["dequant"] != 0 || fused["qmatmul"] == 0 || fused["expert_qmatmul"] == 0 {
		t.Fatalf("after fuse-dequant: %d dequant, %d qmatmul, %d expert_qmatmul", fused["dequant"], fused["qmatmul"], fused["expert_qmatmul"])
	}
	s.g = u.Graph
	compareLogits(t, "fused prompt", s.step(ref.tokens)["logits"].F32(), ref.logits, ref.vocab)
}

// MLXWeightType predicts, without opening it, the type of every weight of a real MLX
// checkpoint (the golden mlx-q4, with its 8-bit overrides).
func TestMLXWeightTypeMatchesCheckpoint(t *testing.T) {
	ck, err := checkpoint.Open(goldenDirs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	predict := qwen35moe.MLXWeightType(ck.Config())
	for _, w := range qwen35moe.Weights(ck.Config()) {
		shape := graph.S(w.Shape...)
		want, err := ck.WeightType(w.Name, shape)
		if err != nil {
			t.Fatal(err)
		}
		got, err := predict(w.Name, shape)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want) {
			t.Errorf("%s: MLXWeightType %s, checkpoint %s", w.Name, got, want)
		}
	}
}
