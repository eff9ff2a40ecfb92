package exec

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func seed(n int64) *int64 { return &n }

func TestGreedyIsArgmax(t *testing.T) {
	logits := []float32{0.1, 3, -2, 2.9}
	if got := NewSampler(SamplingParams{}).Sample(logits, nil); got != 1 {
		t.Fatalf("greedy picked %d, want 1", got)
	}
	// A presence penalty moves the argmax off a token already generated.
	s := NewSampler(SamplingParams{PresencePenalty: 0.5})
	if got := s.Sample(logits, []int32{1}); got != 3 {
		t.Fatalf("penalised greedy picked %d, want 3", got)
	}
}

func TestTopKOneAndTinyTopPAreGreedy(t *testing.T) {
	logits := []float32{1, 2, 5, 4}
	for _, p := range []SamplingParams{
		{Temperature: 1, TopK: 1, Seed: seed(1)},
		{Temperature: 1, TopP: 1e-9, Seed: seed(2)},
		{Temperature: 1, MinP: 0.99, Seed: seed(3)},
	} {
		s := NewSampler(p)
		for i := 0; i < 50; i++ {
			if got := s.Sample(logits, nil); got != 2 {
				t.Fatalf("%+v sampled %d, want only 2", p, got)
			}
		}
	}
}

func TestSeededSamplingIsReproducibleAndMatchesSoftmax(t *testing.T) {
	logits := []float32{0, math.Float32frombits(0xff800000), 1, 2} // id 1 is -Inf: never drawn
	draw := func() []int {
		s := NewSampler(SamplingParams{Temperature: 1, Seed: seed(42)})
		counts := make([]int, 4)
		for i := 0; i < 20000; i++ {
			counts[s.Sample(logits, nil)]++
		}
		return counts
	}
	a, b := draw(), draw()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draws: %v vs %v", a, b)
		}
	}
	if a[1] != 0 {
		t.Fatalf("drew a -Inf token %d times", a[1])
	}
	z := 1 + math.E + math.E*math.E
	for i, want := range []float64{1 / z, 0, math.E / z, math.E * math.E / z} {
		got := float64(a[i]) / 20000
		if math.Abs(got-want) > 0.015 {
			t.Errorf("token %d frequency %.3f, softmax says %.3f", i, got, want)
		}
	}
}

// Greedy decoding without penalties takes the first largest logit, as with them.
func TestGreedyFastPathMatchesPenalisedPath(t *testing.T) {
	logits := []float32{0.5, 2, -1, 2, float32(math.Inf(-1)), 1.5}
	if got := NewSampler(SamplingParams{}).Sample(logits, []int32{5}); got != 1 {
		t.Errorf("greedy picked %d, want 1 (the first of the tied maxima)", got)
	}
	// A zero-strength penalty takes the general path and must agree.
	zero := NewSampler(SamplingParams{PresencePenalty: 1e-300})
	if got := zero.Sample(logits, []int32{5}); got != 1 {
		t.Errorf("penalised greedy picked %d, want 1", got)
	}
}

// BenchmarkSampleGreedy is the host's share of a GPU decode step with greedy sampling:
// one pass over the model's 248,320 logits (go test ./exec -bench SampleGreedy).
func BenchmarkSampleGreedy(b *testing.B) {
	logits := make([]float32, 248320)
	for i := range logits {
		logits[i] = float32(i%977) * 0.01
	}
	for _, c := range []struct {
		name string
		p    SamplingParams
	}{{"plain", SamplingParams{}}, {"presence-penalty", SamplingParams{PresencePenalty: 0.5}}} {
		s := NewSampler(c.p)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				s.Sample(logits, []int32{1, 2, 3})
			}
		})
	}
}

// referenceSample is the sampler's rule written plainly (a map of counts, a sort of the
// whole vocabulary, the filters as prefixes of that order, then the Gumbel-max of draw
// number step): the fast one must pick exactly what it picks, draw for draw.
func referenceSample(p SamplingParams, seed uint64, step int, logits []float32, history []int32) int32 {
	counts := map[int32]int{}
	for _, id := range history {
		counts[id]++
	}
	adj := func(id int) float64 {
		l := float64(logits[id])
		if n := counts[int32(id)]; n > 0 {
			l -= p.PresencePenalty + p.FrequencyPenalty*float64(n)
		}
		return l
	}
	var c []candidate
	for i := range logits {
		if l := adj(i); !math.IsInf(l, -1) && !math.IsNaN(l) {
			c = append(c, candidate{int32(i), l})
		}
	}
	if len(c) == 0 {
		return 0
	}
	sort.Slice(c, func(a, b int) bool { return c[a].before(c[b]) })
	if p.Temperature <= 0 {
		return c[0].id
	}
	topP := p.TopP > 0 && p.TopP < 1
	if p.TopK > 0 && p.TopK < len(c) {
		c = c[:p.TopK]
	}
	if topP && len(c) > TopPCandidates {
		c = c[:TopPCandidates]
	}
	keep := len(c)
	if topP {
		probs := make([]float64, len(c))
		var sum float64
		for i := range c {
			probs[i] = math.Exp((c[i].logit - c[0].logit) / p.Temperature)
			sum += probs[i]
		}
		var cum float64
		for i := range probs {
			if cum/sum >= p.TopP {
				keep = i
				break
			}
			cum += probs[i]
		}
	}
	if p.MinP > 0 {
		for i := 1; i < keep; i++ {
			if math.Exp((c[i].logit-c[0].logit)/p.Temperature) < p.MinP {
				keep = i
				break
			}
		}
	}
	best, bestS := c[0].id, math.Inf(-1)
	for _, cd := range c[:keep] {
		if sc := cd.logit/p.Temperature + Gumbel(seed, step, int(cd.id)); sc > bestS {
			best, bestS = cd.id, sc
		}
	}
	return best
}

func TestSamplerMatchesPlainReference(t *testing.T) {
	gen := rand.New(rand.NewPCG(7, 8))
	for trial := range 300 {
		logits := make([]float32, 50+gen.IntN(400))
		for i := range logits {
			logits[i] = float32(gen.IntN(40)) * 0.25 // many ties
		}
		if trial%7 == 0 {
			logits[gen.IntN(len(logits))] = float32(math.Inf(-1))
		}
		seed := int64(trial)
		p := SamplingParams{Temperature: []float64{0, 0.3, 1, 2}[trial%4], TopK: []int{0, 1, 5, 40, 1000}[trial%5],
			TopP: []float64{0, 0.5, 0.95}[trial%3], MinP: []float64{0, 0.05}[trial%2], Seed: &seed,
			PresencePenalty: []float64{0, 1.5, -0.5}[trial%3], FrequencyPenalty: []float64{0, 0.3}[(trial/3)%2]}
		history := make([]int32, gen.IntN(12))
		for i := range history {
			history[i] = int32(gen.IntN(20))
		}
		s := NewSampler(p)
		for step := range 5 {
			got, want := s.Sample(logits, history), referenceSample(p, uint64(seed), step, logits, history)
			if got != want {
				t.Fatalf("trial %d step %d (%+v): sampled %d, the plain sampler %d", trial, step, p, got, want)
			}
		}
	}
}

// The Gumbel-max over the kept candidates draws from their renormalised softmax: top-p
// 0.8, min-p 0.3 and top-k 2 all keep tokens 0 and 1 here (probabilities 0.64, 0.23, ...),
// drawn 73% / 27%; top-k 3 keeps three.
func TestFilteredDrawsFollowTheRenormalisedSoftmax(t *testing.T) {
	logits := []float32{3, 2, 1, 0, -1}
	e := func(x float64) float64 { return math.Exp(x - 3) }
	two := []float64{e(3) / (e(3) + e(2)), e(2) / (e(3) + e(2)), 0, 0, 0}
	z3 := e(3) + e(2) + e(1)
	three := []float64{e(3) / z3, e(2) / z3, e(1) / z3, 0, 0}
	for _, c := range []struct {
		p    SamplingParams
		want []float64
	}{
		{SamplingParams{Temperature: 1, TopP: 0.8, Seed: seed(1)}, two},
		{SamplingParams{Temperature: 1, MinP: 0.3, Seed: seed(2)}, two},
		{SamplingParams{Temperature: 1, TopK: 2, Seed: seed(3)}, two},
		{SamplingParams{Temperature: 1, TopK: 3, Seed: seed(4)}, three},
	} {
		s := NewSampler(c.p)
		counts := make([]float64, len(logits))
		const n = 20000
		for range n {
			counts[s.Sample(logits, nil)]++
		}
		for i, w := range c.want {
			if got := counts[i] / n; math.Abs(got-w) > 0.015 || (w == 0 && got != 0) {
				t.Errorf("%+v: token %d drawn %.3f of the time, want %.3f", c.p, i, got, w)
			}
		}
	}
}
