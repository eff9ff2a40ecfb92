package serve

import (
	"math"
)

// logprobRecorder records, for every generated token, its log probability and the top
// alternatives, from the logits the token was sampled from (exec's OnLogits hook). They
// are the log-softmax of those logits after presence and frequency penalties, before
// temperature, top-k, top-p, min-p and before any structured-output mask (as OpenAI
// reports them: the model's distribution, not the filtered one the token was drawn from).
// Greedy decoding without penalties therefore always finds the chosen token first in the
// top list.
type logprobRecorder struct {
	top                 int
	presence, frequency float64
	history             []int32 // the tokens recorded so far, for the penalties
	entries             []tokenLogprob
}

type tokenLogprob struct {
	ID      int32
	Logprob float64
	Top     []topLogprob
}

type topLogprob struct {
	ID      int32
	Logprob float64
}

// noLogprob stands for minus infinity, which JSON cannot carry (OpenAI uses it too).
const noLogprob = -9999.0

// record is the OnLogits hook: id was sampled from logits.
func (l *logprobRecorder) record(id int32, logits []float32) {
	history := l.history
	l.history = append(l.history, id)
	var counts map[int32]int
	if (l.presence != 0 || l.frequency != 0) && len(history) > 0 {
		counts = make(map[int32]int, len(history))
		for _, h := range history {
			counts[h]++
		}
	}
	adjusted := func(i int) float64 {
		v := float64(logits[i])
		if n := counts[int32(i)]; n > 0 {
			v -= l.presence + l.frequency*float64(n)
		}
		return v
	}
	maxV := math.Inf(-1)
	for i := range logits {
		if v := adjusted(i); v > maxV {
			maxV = v
		}
	}
	var sum float64
	for i := range logits {
		if v := adjusted(i); !math.IsNaN(v) {
			sum += math.Exp(v - maxV)
		}
	}
	lse := maxV + math.Log(sum)
	logprob := func(i int) float64 {
		v := adjusted(i) - lse
		if math.IsInf(v, -1) || math.IsNaN(v) {
			return noLogprob
		}
		return v
	}
	e := tokenLogprob{ID: id, Logprob: noLogprob}
	if int(id) >= 0 && int(id) < len(logits) {
		e.Logprob = logprob(int(id))
	}
	if l.top > 0 {
		// a sorted insertion list: top is at most 20
		best := make([]topLogprob, 0, l.top+1)
		for i := range logits {
			v := adjusted(i)
			if math.IsNaN(v) || len(best) == l.top && !(v > best[len(best)-1].Logprob) {
				continue
			}
			at := len(best)
			for at > 0 && v > best[at-1].Logprob {
				at--
			}
			best = append(best, topLogprob{})
			copy(best[at+1:], best[at:])
			best[at] = topLogprob{ID: int32(i), Logprob: v}
			if len(best) > l.top {
				best = best[:l.top]
			}
		}
		for i := range best {
			best[i].Logprob = logprob(int(best[i].ID))
		}
		e.Top = best
	}
	l.entries = append(l.entries, e)
}
