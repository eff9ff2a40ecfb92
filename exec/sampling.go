package exec

import (
	"math"
	"math/rand/v2"
	"sort"
)

// SamplingParams choose the next token from logits. The zero value is greedy decoding.
// Filters apply in the order llama.cpp and vLLM use: penalties, then top-k, then
// temperature, then top-p and min-p on the tempered distribution.
type SamplingParams struct {
	// Temperature 0 picks the argmax; otherwise logits are divided by it.
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set whose probability reaches P (0 or 1: all).
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one (0: none).
	MinP float64
	// Seed makes sampling reproducible; nil seeds from the system's entropy.
	Seed *int64
	// PresencePenalty is subtracted once from every token already generated;
	// FrequencyPenalty once per occurrence (OpenAI semantics).
	PresencePenalty  float64
	FrequencyPenalty float64
}

// Sampler draws tokens with fixed parameters and its own random stream.
type Sampler struct {
	p   SamplingParams
	rng *rand.Rand
	// scratch reused across calls so that sampling does not allocate per token.
	cand []candidate
}

type candidate struct {
	id    int32
	logit float64
}

// NewSampler returns a sampler for p.
func NewSampler(p SamplingParams) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = uint64(*p.Seed)
	} else {
		seed = rand.Uint64()
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Sample picks the next token. history is the generated tokens so far (for penalties).
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	p := s.p
	penalised := p.PresencePenalty != 0 || p.FrequencyPenalty != 0
	var counts map[int32]int
	if penalised && len(history) > 0 {
		counts = make(map[int32]int, len(history))
		for _, id := range history {
			counts[id]++
		}
	}
	adjusted := func(id int32) float64 {
		l := float64(logits[id])
		if n := counts[id]; n > 0 {
			l -= p.PresencePenalty + p.FrequencyPenalty*float64(n)
		}
		return l
	}
	if p.Temperature <= 0 {
		best, bestL := int32(0), math.Inf(-1)
		for i := range logits {
			if l := adjusted(int32(i)); l > bestL {
				best, bestL = int32(i), l
			}
		}
		return best
	}
	s.cand = s.cand[:0]
	for i := range logits {
		l := adjusted(int32(i))
		if !math.IsInf(l, -1) && !math.IsNaN(l) {
			s.cand = append(s.cand, candidate{int32(i), l})
		}
	}
	if len(s.cand) == 0 {
		return 0
	}
	sort.Slice(s.cand, func(a, b int) bool {
		if s.cand[a].logit != s.cand[b].logit {
			return s.cand[a].logit > s.cand[b].logit
		}
		return s.cand[a].id < s.cand[b].id
	})
	c := s.cand
	if p.TopK > 0 && p.TopK < len(c) {
		c = c[:p.TopK]
	}
	// Softmax of the tempered logits, shifted by the maximum for stability.
	probs := make([]float64, len(c))
	var sum float64
	for i := range c {
		probs[i] = math.Exp((c[i].logit - c[0].logit) / p.Temperature)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	keep := len(c)
	if p.TopP > 0 && p.TopP < 1 {
		var cum float64
		for i, pr := range probs {
			cum += pr
			if cum >= p.TopP {
				keep = i + 1
				break
			}
		}
	}
	if p.MinP > 0 {
		floor := p.MinP * probs[0]
		for i := 1; i < keep; i++ {
			if probs[i] < floor {
				keep = i
				break
			}
		}
	}
	var total float64
	for _, pr := range probs[:keep] {
		total += pr
	}
	r := s.rng.Float64() * total
	for i, pr := range probs[:keep] {
		r -= pr
		if r < 0 {
			return c[i].id
		}
	}
	return c[keep-1].id
}
