package verify

import (
	"context"
	"fmt"
	"math"
	"strings"

	"pistil/exec"
)

// Options say how the engine reads the reference tokens.
type Options struct {
	// DecodeFrom > 0 prefills the first DecodeFrom tokens and feeds the rest one at a time
	// through the decode plan; 0 prefills the whole prompt.
	DecodeFrom int
}

// Report is the comparison of the engine's logits with the reference's.
type Report struct {
	Positions int
	// MaxAbsErr is the largest |engine - reference| over every logit of every position
	// (prompt and continuation); MaxRelErr divides by the largest |reference| logit of the
	// same row.
	MaxAbsErr, MaxRelErr float64
	WorstPosition        int
	// Top1Agree is the fraction of positions whose argmax agrees.
	Top1Agree float64
	// Perplexity of the reference's next prompt token under each side's distribution.
	EnginePPL, ReferencePPL float64
	// GreedyMatch says whether the engine's own greedy continuation equals GenTokens;
	// GreedyTokens is that continuation.
	GreedyMatch  bool
	GreedyTokens []int32
}

// PPLRatio is engine perplexity / reference perplexity.
func (r *Report) PPLRatio() float64 { return r.EnginePPL / r.ReferencePPL }

func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "positions        %d\n", r.Positions)
	fmt.Fprintf(&b, "max abs error    %.3g (position %d)\n", r.MaxAbsErr, r.WorstPosition)
	fmt.Fprintf(&b, "max rel error    %.3g\n", r.MaxRelErr)
	fmt.Fprintf(&b, "top-1 agreement  %.2f%%\n", 100*r.Top1Agree)
	fmt.Fprintf(&b, "perplexity       engine %.4f, reference %.4f, ratio %.5f\n", r.EnginePPL, r.ReferencePPL, r.PPLRatio())
	fmt.Fprintf(&b, "greedy           %v (%d tokens)\n", map[bool]string{true: "matches", false: "DIFFERS"}[r.GreedyMatch], len(r.GreedyTokens))
	return b.String()
}

// Run reads ref teacher-forced through a fresh session of m (opened with AllLogits) and
// then decodes greedily for len(ref.GenTokens) tokens.
func Run(ctx context.Context, m *exec.Model, ref *Reference, o Options) (*Report, error) {
	if v := m.Config().VocabSize; v != ref.Vocab {
		return nil, fmt.Errorf("reference has %d logits per position but the model's vocabulary is %d", ref.Vocab, v)
	}
	if o.DecodeFrom < 0 || o.DecodeFrom > len(ref.Tokens) {
		return nil, fmt.Errorf("decode-from %d is outside the prompt [0, %d]", o.DecodeFrom, len(ref.Tokens))
	}
	s, err := m.NewSession(len(ref.Tokens) + len(ref.GenTokens))
	if err != nil {
		return nil, err
	}
	prefill := len(ref.Tokens)
	if o.DecodeFrom > 0 {
		prefill = o.DecodeFrom
	}
	flat, err := s.Forward(ctx, ref.Tokens[:prefill])
	if err != nil {
		return nil, err
	}
	vocab := ref.Vocab
	var rows [][]float32
	for r := 0; r < prefill; r++ {
		rows = append(rows, flat[r*vocab:(r+1)*vocab])
	}
	for _, id := range ref.Tokens[prefill:] {
		if err := s.Decode(ctx, id); err != nil {
			return nil, err
		}
		rows = append(rows, append([]float32(nil), s.Logits()...))
	}
	rep := &Report{}
	var engNLL, refNLL float64
	agree := 0
	compare := func(pos int, got, want []float32) {
		rep.Positions++
		maxRef := 0.0
		for _, w := range want {
			maxRef = math.Max(maxRef, math.Abs(float64(w)))
		}
		for i := range want {
			d := math.Abs(float64(got[i]) - float64(want[i]))
			if d > rep.MaxAbsErr {
				rep.MaxAbsErr, rep.WorstPosition = d, pos
			}
			if maxRef > 0 {
				rep.MaxRelErr = math.Max(rep.MaxRelErr, d/maxRef)
			}
		}
		if argmax(got) == argmax(want) {
			agree++
		}
	}
	for p, row := range rows {
		compare(p, row, ref.Logits[p])
		if p+1 < len(ref.Tokens) {
			next := ref.Tokens[p+1]
			engNLL -= logSoftmax(row, next)
			refNLL -= logSoftmax(ref.Logits[p], next)
		}
	}
	// Greedy continuation through the generation loop (zero sampling parameters are
	// greedy): the engine follows its own argmax; the logits are compared only while the
	// continuation still matches the reference's (after a divergence the contexts differ
	// and the numbers would mean nothing).
	rep.GreedyMatch = true
	if len(ref.GenTokens) > 0 {
		_, err := s.Generate(ctx, nil, exec.GenerateOptions{
			MaxTokens: len(ref.GenTokens),
			OnLogits: func(id int32, logits []float32) {
				i := len(rep.GreedyTokens)
				if rep.GreedyMatch {
					compare(len(ref.Tokens)+i, logits, ref.GenLogits[i])
				}
				rep.GreedyTokens = append(rep.GreedyTokens, id)
				if id != ref.GenTokens[i] {
					rep.GreedyMatch = false
				}
			},
		})
		if err != nil {
			return nil, err
		}
	}
	rep.Top1Agree = float64(agree) / float64(rep.Positions)
	n := float64(len(ref.Tokens) - 1)
	rep.EnginePPL, rep.ReferencePPL = math.Exp(engNLL/n), math.Exp(refNLL/n)
	return rep, nil
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

// logSoftmax is log p(id) under softmax(x), computed in float64.
func logSoftmax(x []float32, id int32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - m)
	}
	return float64(x[id]) - m - math.Log(sum)
}
