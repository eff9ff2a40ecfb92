package constrain

import (
	"math/rand/v2"
	"testing"
)

// argmax is the simplest sampler: the most likely token.
type argmax struct{}

func (argmax) Sample(logits []float32, _ []int32) int32 {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// With thinking on, the reasoning is free but cannot end the turn, </think> comes at the
// latest when the budget left is what the answer needs, and the answer after it follows
// the grammar; end-of-turn logits boosted everywhere test that the mask, not luck, decides.
func TestSamplerThinkingThenConstrained(t *testing.T) {
	v, tok := synthVocab(t)
	doc := []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":3,"maximum":9},"b":{"type":"string","maxLength":4}},"required":["a","b"]}`)
	g, err := CompileSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	val := validator(t, doc)
	rng := rand.New(rand.NewPCG(51, 52))
	for _, thinking := range []bool{false, true} {
		for run := 0; run < 10; run++ {
			const maxTokens = 80
			cs, err := NewSampler(argmax{}, g, v, Options{MaxTokens: maxTokens, Thinking: thinking})
			if err != nil {
				t.Fatal(err)
			}
			reserve := cs.reserve()
			var history []int32
			logits := make([]float32, v.Size())
			closedAt := -1
			for len(history) < maxTokens {
				for i := range logits {
					logits[i] = rng.Float32() * 4
				}
				for _, id := range v.syms[symEnd] {
					logits[id] = 100 // the model wants to stop at every step
				}
				id := cs.Sample(logits, history)
				history = append(history, id)
				if id == v.thinkClose && closedAt < 0 {
					closedAt = len(history)
				}
				if cs.Matcher().Done() {
					break
				}
			}
			if !cs.Matcher().Done() {
				t.Fatalf("thinking %v: no end in %d tokens", thinking, maxTokens)
			}
			answer := history
			if thinking {
				if closedAt < 0 {
					t.Fatal("thinking: </think> never came")
				}
				if at := closedAt - 1; at > maxTokens-reserve {
					t.Fatalf("</think> at %d, after the answer's reserve of %d tokens began", at, reserve)
				}
				for _, id := range history[:closedAt-1] {
					for _, end := range v.syms[symEnd] {
						if id == end {
							t.Fatal("the turn ended inside the reasoning")
						}
					}
				}
				answer = history[closedAt:]
			} else if closedAt >= 0 {
				t.Fatalf("thinking off: </think> at %d", closedAt)
			}
			text := tok.Decode(answer[:len(answer)-1])
			if err := validate(val, text); err != nil {
				t.Fatalf("thinking %v: %q: %v", thinking, text, err)
			}
		}
	}
}
