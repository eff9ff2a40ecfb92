package exec

import (
	"math"
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
