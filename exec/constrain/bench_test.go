package constrain

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"pistil/internal/schemagen"
)

// BenchmarkMaskQwen measures what constraining costs per token on the real Qwen
// vocabulary (248,320 tokens): the Mask call of every step of random-choice generations
// over the random test schemas, first visits of automaton states (trie walks, transition
// building) included. It reports the median and 99th percentile per-token latency; ns/op
// is one whole generation. Percentiles are given in wall time and in the thread's CPU
// time (Linux): on a shared machine the wall time of a call includes time the scheduler
// gave to other processes.
func BenchmarkMaskQwen(b *testing.B) {
	v, _ := qwenVocab(b)
	rng := rand.New(rand.NewPCG(11, 12))
	var grammars []*Grammar
	for len(grammars) < 50 {
		g, err := CompileSchema(schemagen.Schema(rng))
		if err != nil {
			b.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	benchMasks(b, v, grammars, rng, 200)
}

// BenchmarkNewVocabQwen is the one-time cost per model of indexing the tokenizer.
func BenchmarkNewVocabQwen(b *testing.B) {
	_, tok := qwenVocab(b)
	for i := 0; i < b.N; i++ {
		if _, err := NewVocab(tok, tok.VocabSize(), endTokens(tok)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaskQwenToolCall is BenchmarkMaskQwen for forced tool calls: random tool sets
// (one to three tools with random parameter schemas), parallel calls allowed.
func BenchmarkMaskQwenToolCall(b *testing.B) {
	v, _ := qwenVocab(b)
	rng := rand.New(rand.NewPCG(13, 14))
	var grammars []*Grammar
	for len(grammars) < 20 {
		var tools []Tool
		for k := 0; k < 1+rng.IntN(3); k++ {
			tools = append(tools, Tool{Name: "fn_" + string(rune('a'+k)), Parameters: schemagen.Parameters(rng)})
		}
		g, err := CompileToolCall(tools, true)
		if err != nil {
			b.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	benchMasks(b, v, grammars, rng, 300)
}

// benchMasks runs random-choice generations of up to budget tokens through the grammars
// in turn and reports per-token mask latency percentiles.
func benchMasks(b *testing.B, v *Vocab, grammars []*Grammar, rng *rand.Rand, budget int) {
	mask := make([]uint64, v.words)
	var lat, cpu []time.Duration
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g := grammars[i%len(grammars)]
		m, _ := g.NewMatcher(v, false)
		for step := 0; step < budget && !m.Done(); step++ {
			start, startCPU := time.Now(), threadCPU()
			n := m.Mask(mask, budget-step)
			lat = append(lat, time.Since(start))
			cpu = append(cpu, time.Duration(threadCPU()-startCPU))
			if err := m.Accept(nthSet(mask, rng.IntN(n))); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	report := func(d []time.Duration, unit string) {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "median-"+unit)
		b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-"+unit)
		b.ReportMetric(float64(d[len(d)-1].Nanoseconds())/1e3, "max-"+unit)
	}
	if len(lat) > 0 {
		report(lat, "wall-us/token")
		if cpu[len(cpu)-1] > 0 || cpu[0] > 0 {
			report(cpu, "cpu-us/token")
		}
		b.ReportMetric(float64(len(lat))/float64(b.N), "tokens/op")
	}
}
