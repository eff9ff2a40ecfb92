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
	// TopP keeps the smallest set whose probability reaches P (0 or 1: all), taken from
	// at most the TopPCandidates most likely tokens.
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

// TopPCandidates bounds the tokens top-p looks at: the nucleus is cut from the this many
// most likely tokens (after top-k), so a device sampler can sort them in one group's
// memory (ops/kernels/sample.k, kernels.SampleCandidates) and host and device agree.
const TopPCandidates = 1024

// Sampler draws tokens with fixed parameters. Its randomness is counter-based: the n-th
// token it draws uses the Gumbel noise Gumbel(seed, n, id) of every candidate id, so a
// device that knows the seed and n draws the same token from the same logits (up to
// float32 rounding: ops/kernels/sample.k), and a seeded run is reproducible wherever it
// is sampled.
type Sampler struct {
	p    SamplingParams
	seed uint64
	// draws is how many tokens this sampler has drawn (the counter of the next draw).
	draws int
	// scratch reused across calls so that sampling does not allocate per token.
	cand  []candidate
	probs []float64
	// penalty[id] is what the penalties subtract from token id's logit this call: set
	// for the generated tokens only and cleared after, so a pass over the vocabulary
	// costs one extra load per entry, not a map lookup.
	penalty []float64
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
	return &Sampler{p: p, seed: seed}
}

// Params are the sampler's parameters.
func (s *Sampler) Params() SamplingParams { return s.p }

// Seed is the seed of the sampler's draws (the one given, or the one drawn for it).
func (s *Sampler) Seed() uint64 { return s.seed }

// Draws is the counter of the next draw: how many tokens the sampler has drawn, counting
// those a device drew for it (Skip).
func (s *Sampler) Draws() int { return s.draws }

// Skip advances the counter past n draws made elsewhere (on a device, with this
// sampler's seed and counters Draws() .. Draws()+n-1).
func (s *Sampler) Skip(n int) { s.draws += n }

// mix is SplitMix64's finaliser (sample.k's sample_mix).
func mix(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// Gumbel is the noise of token id in draw number step under seed: -log(-log(u)) with u
// in (0, 1) a hash of the three, on a grid of 2^-24 that float32 holds exactly, so the
// device (sample.k's sample_gumbel) starts from the same u.
func Gumbel(seed uint64, step, id int) float64 {
	h := mix(seed ^ mix(uint64(uint32(step))<<32|uint64(uint32(id))))
	u := float64(2*uint32(h>>41)+1) / (1 << 24)
	return -math.Log(-math.Log(u))
}

// Sample picks the next token. history is the generated tokens so far (for penalties).
func (s *Sampler) Sample(logits []float32, history []int32) int32 {
	step := s.draws
	s.draws++
	p := s.p
	penalised := (p.PresencePenalty != 0 || p.FrequencyPenalty != 0) && len(history) > 0
	if !penalised && p.Temperature <= 0 {
		return argmax(logits)
	}
	var pen []float64
	if penalised {
		if len(s.penalty) < len(logits) {
			s.penalty = make([]float64, len(logits))
		}
		pen = s.penalty[:len(logits)]
		for _, id := range history {
			if id >= 0 && int(id) < len(pen) {
				pen[id] = p.PresencePenalty
			}
		}
		for _, id := range history {
			if id >= 0 && int(id) < len(pen) {
				pen[id] += p.FrequencyPenalty
			}
		}
		defer func() {
			for _, id := range history {
				if id >= 0 && int(id) < len(pen) {
					pen[id] = 0
				}
			}
		}()
	}
	adjusted := func(i int) float64 {
		if pen != nil {
			return float64(logits[i]) - pen[i]
		}
		return float64(logits[i])
	}
	if p.Temperature <= 0 {
		best, bestL := int32(0), math.Inf(-1)
		for i := range logits {
			if l := adjusted(i); l > bestL {
				best, bestL = int32(i), l
			}
		}
		return best
	}
	// min-p keeps x with (x - max)/T >= log(MinP) (the most likely token always).
	lnMinP := math.Inf(-1)
	if p.MinP > 0 {
		lnMinP = min(math.Log(p.MinP), 0)
	}
	topP := p.TopP > 0 && p.TopP < 1
	if !topP && (p.TopK <= 0 || p.TopK >= len(logits)) {
		// No ranking needed: the Gumbel-max over every finite logit min-p keeps.
		maxL := math.Inf(-1)
		for i := range logits {
			if l := adjusted(i); !math.IsNaN(l) && l > maxL {
				maxL = l
			}
		}
		best, bestS := int32(0), math.Inf(-1)
		found := false
		for i := range logits {
			l := adjusted(i)
			if math.IsInf(l, -1) || math.IsNaN(l) || (l-maxL)/p.Temperature < lnMinP {
				continue
			}
			if sc := l/p.Temperature + Gumbel(s.seed, step, i); !found || sc > bestS {
				best, bestS, found = int32(i), sc, true
			}
		}
		return best
	}
	k := p.TopK
	if topP && (k <= 0 || k > TopPCandidates) {
		k = TopPCandidates
	}
	c := s.candidates(len(logits), adjusted, k)
	if len(c) == 0 {
		return 0
	}
	keep := len(c)
	if topP {
		// The probabilities of the tempered logits over the candidates, shifted by the
		// maximum for stability; a candidate stays while the mass before it is below P.
		probs := s.probs[:0]
		var sum float64
		for i := range c {
			pr := math.Exp((c[i].logit - c[0].logit) / p.Temperature)
			probs = append(probs, pr)
			sum += pr
		}
		s.probs = probs
		var cum float64
		for i, pr := range probs {
			if cum >= p.TopP*sum {
				keep = i
				break
			}
			cum += pr
		}
	}
	for i := 1; i < keep; i++ {
		if (c[i].logit-c[0].logit)/p.Temperature < lnMinP {
			keep = i
			break
		}
	}
	// The Gumbel-max over the kept candidates: a draw from their softmax.
	best, bestS := c[0].id, math.Inf(-1)
	for _, cd := range c[:keep] {
		if sc := cd.logit/p.Temperature + Gumbel(s.seed, step, int(cd.id)); sc > bestS {
			best, bestS = cd.id, sc
		}
	}
	return best
}

// before orders candidates by logit, highest first, ties by the lower id.
func (a candidate) before(b candidate) bool {
	if a.logit != b.logit {
		return a.logit > b.logit
	}
	return a.id < b.id
}

// candidates are the finite logits in sampling order; with topK > 0 only the first topK
// of them, selected through a bounded heap (O(V log K), not a sort of the vocabulary).
func (s *Sampler) candidates(n int, logit func(int) float64, topK int) []candidate {
	c := s.cand[:0]
	if topK <= 0 || topK >= n {
		for i := range n {
			if l := logit(i); !math.IsInf(l, -1) && !math.IsNaN(l) {
				c = append(c, candidate{int32(i), l})
			}
		}
		sort.Slice(c, func(a, b int) bool { return c[a].before(c[b]) })
		s.cand = c
		return c
	}
	// c is a min-heap (by sampling order) of the best topK so far: its root is the
	// candidate that leaves first.
	worse := func(a, b int) bool { return c[b].before(c[a]) }
	down := func(i int) {
		for {
			l, w := 2*i+1, i
			if l < len(c) && worse(l, w) {
				w = l
			}
			if r := l + 1; r < len(c) && worse(r, w) {
				w = r
			}
			if w == i {
				return
			}
			c[i], c[w] = c[w], c[i]
			i = w
		}
	}
	for i := range n {
		l := logit(i)
		if math.IsInf(l, -1) || math.IsNaN(l) {
			continue
		}
		cd := candidate{int32(i), l}
		switch {
		case len(c) < topK:
			c = append(c, cd)
			for j := len(c) - 1; j > 0 && worse(j, (j-1)/2); j = (j - 1) / 2 {
				c[j], c[(j-1)/2] = c[(j-1)/2], c[j]
			}
		case cd.before(c[0]):
			c[0] = cd
			down(0)
		}
	}
	sort.Slice(c, func(a, b int) bool { return c[a].before(c[b]) })
	s.cand = c
	return c
}

// argmax is greedy decoding without penalties: the first largest logit, in one tight
// pass (a closure and a map lookup per entry cost about a millisecond over a 248,320-token
// vocabulary, a seventh of a GPU decode step).
func argmax(logits []float32) int32 {
	best, bestV := 0, float32(math.Inf(-1))
	for i, v := range logits {
		if v > bestV {
			best, bestV = i, v
		}
	}
	return int32(best)
}
