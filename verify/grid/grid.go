// Package grid is the differential test over model shapes: it writes a random checkpoint
// of each shape of the grid (Shapes) with synth, runs one prompt through a reference
// backend whole, then through the backend under test whole, in chunks of 1, 7 and 64 and
// through decode, and compares every position's logits with the reference's. The CPU
// backend is the reference; the CUDA test (cuda/grid_test.go) runs the grid on a GPU,
// and this package's own test runs it CPU against CPU (whole vs chunked vs decode), so
// the harness itself is tested where there is no GPU.
package grid

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"pistil/exec"
	"pistil/models/synth"
	"pistil/pipeline"
)

// Shape is one checkpoint of the grid.
type Shape struct {
	Name   string
	Layout synth.Layout
	Dims   synth.Dims
	// CI: small enough for the CPU self-consistency run of every `go test ./...`.
	CI bool
}

// ID names the shape and layout, e.g. "issue10/mlx-q4" (test names, logs).
func (s Shape) ID() string { return s.Name + "/" + string(s.Layout) }

// PromptLen is the length of the prompt every path feeds. It splits into many of the
// piece sizes the runtime uses: 83 = 64+16+2+1 at chunk 64 and 11·7+4+2 at chunk 7 (and
// the decode path prefills 32+8).
const PromptLen = 83

// DecodeFrom is where the decode path switches from prefill (32+8 pieces) to one token
// per step, as in issue 10's `pistil check --decode-from 40`.
const DecodeFrom = 40

// Path is one way of feeding the prompt to a session.
type Path struct {
	Name string
	// Chunk is the prefill chunk size (exec.Options.Chunk); prompts split into chunks and
	// power-of-two pieces of the remainder.
	Chunk int
	// Decode > 0 prefills the first Decode tokens and feeds the rest one at a time
	// through Session.Decode.
	Decode int
}

// Paths are the ways the grid feeds the prompt: whole (one piece of PromptLen tokens),
// chunks of 1, 7 and 64, and prefill then decode.
var Paths = []Path{
	{Name: "whole", Chunk: PromptLen},
	{Name: "chunk1", Chunk: 1},
	{Name: "chunk7", Chunk: 7},
	{Name: "chunk64", Chunk: 64},
	{Name: "decode", Chunk: PromptLen, Decode: DecodeFrom},
}

// Tolerance bounds a path's logits against the reference's, per position: the largest
// absolute error may be Abs + Rel·max|reference logit of that position|. (Within it the
// argmax can only change where the reference's top two are within twice the bound, so
// top-1 agreement is reported, not tested on its own.)
type Tolerance struct {
	Abs, Rel float64
}

func (t Tolerance) bound(maxRef float64) float64 { return t.Abs + t.Rel*maxRef }

// Result is one (shape, path) comparison.
type Result struct {
	Shape, Path string
	// MaxAbs is the largest |got - want| over every logit; at Position it exceeds the
	// position's bound by the largest ratio Excess (≤ 1 passes).
	MaxAbs   float64
	Position int
	Excess   float64
	// Over counts the positions past their bound and First is the earliest (-1: none):
	// one or two positions suggest a routing decision flipped at a near tie, many from
	// First on a wrong step whose error the state carries forward.
	Over, First int
	// Top1 is the fraction of positions whose argmax agrees.
	Top1 float64
	// NaN counts non-finite logits the path produced.
	NaN int
}

// Pass says whether the path stayed within tolerance.
func (r Result) Pass() bool { return r.Excess <= 1 && r.NaN == 0 }

func (r Result) String() string {
	verdict := "PASS"
	if !r.Pass() {
		verdict = "FAIL"
	}
	over := "none over"
	if r.Over > 0 {
		over = fmt.Sprintf("%d over, from %d", r.Over, r.First)
	}
	return fmt.Sprintf("%-28s %-8s max abs %.3g (position %d, %.2f of its bound; %s)  top-1 %.1f%%  non-finite %d  %s",
		r.Shape, r.Path, r.MaxAbs, r.Position, r.Excess, over, 100*r.Top1, r.NaN, verdict)
}

// Options say which backends the grid compares and how.
type Options struct {
	Reference, Backend string // exec backend names, e.g. "cpu" and "cuda"
	Tolerance          Tolerance
	// Passes are -pass switches for both sides (e.g. "fuse-swiglu/off"), PipelineFile a
	// pipeline.toml for both (empty: the built-in defaults); Workers bounds the CPU
	// backend's goroutines (0: every core).
	Passes       []string
	PipelineFile string
	Workers      int
	// Seed fixes the checkpoint and the prompt.
	Seed uint64
}

// Write writes the shape's checkpoint into dir/<name>-<layout> and returns its folder.
func Write(s Shape, dir string, seed uint64) (string, error) {
	out := filepath.Join(dir, strings.ReplaceAll(s.ID(), "/", "-"))
	d := s.Dims
	if _, err := synth.Write(synth.Options{Dims: &d, Layout: s.Layout, Seed: seed, Out: out, Workers: 2}); err != nil {
		return "", fmt.Errorf("%s: %w", s.ID(), err)
	}
	return out, nil
}

// Prompt is the grid's prompt for a vocabulary: PromptLen ids drawn from a fixed seed.
func Prompt(vocab int, seed uint64) []int32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	p := make([]int32, PromptLen)
	for i := range p {
		p[i] = int32(r.IntN(vocab))
	}
	return p
}

// Run compares every path of the checkpoint in dir on o.Backend with the reference
// backend's whole-prompt logits. It returns one result per path; an error means a path
// could not run at all (which is a failure of the backend too, reported as such).
func Run(ctx context.Context, s Shape, dir string, o Options) ([]Result, error) {
	prompt := Prompt(s.Dims.Vocab, o.Seed)
	ref, err := logits(ctx, dir, o.Reference, Paths[0], prompt, o)
	if err != nil {
		return nil, fmt.Errorf("%s: reference (%s, whole): %w", s.ID(), o.Reference, err)
	}
	var out []Result
	for _, p := range Paths {
		got, err := logits(ctx, dir, o.Backend, p, prompt, o)
		if err != nil {
			return out, fmt.Errorf("%s: %s path %s: %w", s.ID(), o.Backend, p.Name, err)
		}
		r := compare(got, ref, o.Tolerance)
		r.Shape, r.Path = s.ID(), p.Name
		out = append(out, r)
	}
	return out, nil
}

// logits feeds prompt to a fresh session of the checkpoint on backend along path p and
// returns the logits after every token.
func logits(ctx context.Context, dir, backend string, p Path, prompt []int32, o Options) ([][]float32, error) {
	pipe, err := pipeline.Load(o.PipelineFile)
	if err != nil {
		return nil, err
	}
	eo, err := pipe.ExecOptions(backend, o.Passes)
	if err != nil {
		return nil, err
	}
	eo.Chunk, eo.AllLogits = p.Chunk, true
	if o.Workers > 0 {
		eo.Workers = o.Workers
	}
	m, err := exec.Open(dir, eo)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	s, err := m.NewSession(len(prompt))
	if err != nil {
		return nil, err
	}
	prefill := len(prompt)
	if p.Decode > 0 {
		prefill = p.Decode
	}
	flat, err := s.Forward(ctx, prompt[:prefill])
	if err != nil {
		return nil, err
	}
	vocab := m.Config().VocabSize
	if len(flat) != prefill*vocab {
		return nil, fmt.Errorf("prefill of %d tokens returned %d logits, want %d", prefill, len(flat), prefill*vocab)
	}
	var rows [][]float32
	for i := 0; i < prefill; i++ {
		rows = append(rows, flat[i*vocab:(i+1)*vocab])
	}
	for _, id := range prompt[prefill:] {
		if err := s.Decode(ctx, id); err != nil {
			return nil, err
		}
		rows = append(rows, append([]float32(nil), s.Logits()...))
	}
	return rows, nil
}

// compare measures got against want position by position.
func compare(got, want [][]float32, tol Tolerance) Result {
	r := Result{First: -1}
	agree := 0
	for pos := range want {
		maxRef := 0.0
		for _, w := range want[pos] {
			maxRef = math.Max(maxRef, math.Abs(float64(w)))
		}
		bound := tol.bound(maxRef)
		worst := 0.0
		for i, w := range want[pos] {
			g := float64(got[pos][i])
			if math.IsNaN(g) || math.IsInf(g, 0) {
				r.NaN++
				continue
			}
			worst = math.Max(worst, math.Abs(g-float64(w)))
		}
		if worst > r.MaxAbs {
			r.MaxAbs = worst
		}
		if e := worst / bound; e > r.Excess {
			r.Excess, r.Position = e, pos
		}
		if worst > bound {
			r.Over++
			if r.First < 0 {
				r.First = pos
			}
		}
		if argmax(got[pos]) == argmax(want[pos]) {
			agree++
		}
	}
	r.Top1 = float64(agree) / float64(len(want))
	return r
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
