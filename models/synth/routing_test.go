package synth

import (
	"math"
	"sort"
	"testing"

	"pistil/ops"
)

// rmsNormed decodes row r of w and RMS-normalises it (the input every router and the
// lm_head see, up to a norm weight near 1).
func rmsNormed(w *ops.Tensor, r int) []float32 {
	cols := w.Shape[len(w.Shape)-1]
	x := make([]float32, cols)
	w.Row(r, cols, x)
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(cols)+1e-6))
	for i := range x {
		x[i] *= inv
	}
	return x
}

// logits is W·x for every row of a 2-D weight.
func logits(w *ops.Tensor, x []float32) []float64 {
	rows, cols := w.Shape[0], w.Shape[1]
	row := make([]float32, cols)
	out := make([]float64, rows)
	for r := 0; r < rows; r++ {
		w.Row(r, cols, row)
		for c, v := range row {
			out[r] += float64(v) * float64(x[c])
		}
	}
	return out
}

// Random weights must route like a working model: different tokens pick different
// experts, so over a few dozen tokens nearly every expert is used, and the head gives
// different tokens different argmaxes (generation on a random model varies).
func TestRoutingAndLogitsSpread(t *testing.T) {
	for _, layout := range []Layout{MLXQ4, HF} {
		ck, ws := openBound(t, writeTiny(t, layout, 11, 0))
		cfg := ck.Config()
		embed, router, head := ws["embed_tokens"], ws["layers.0.mlp.gate"], ws["lm_head"]
		used, argmaxes := map[int]bool{}, map[int]bool{}
		const tokens = 48
		for tok := 0; tok < tokens; tok++ {
			x := rmsNormed(embed, tok*7%cfg.VocabSize)
			scores := logits(router, x)
			ids := make([]int, len(scores))
			for i := range ids {
				ids[i] = i
			}
			sort.Slice(ids, func(a, b int) bool { return scores[ids[a]] > scores[ids[b]] })
			for _, e := range ids[:cfg.NumExpertsPerTok] {
				used[e] = true
			}
			lg := logits(head, x)
			best := 0
			for i, v := range lg {
				if v > lg[best] {
					best = i
				}
			}
			argmaxes[best] = true
		}
		if len(used) < cfg.NumExperts*9/10 {
			t.Errorf("%s: %d tokens used only %d of %d experts", layout, tokens, len(used), cfg.NumExperts)
		}
		if len(argmaxes) < tokens/2 {
			t.Errorf("%s: %d tokens gave only %d distinct argmaxes", layout, tokens, len(argmaxes))
		}
	}
}
