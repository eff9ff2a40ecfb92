//go:build linux

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"pistil/exec"
	"pistil/ops/kernels"
)

// deviceSample runs the sample kernel once: logits, the tokens generated before the
// step's input (counts, for penalties), the input token in and draw number draw.
func deviceSample(t *testing.T, g *device, logits []float32, history []int32, draw int, sp exec.DeviceSampling) int32 {
	t.Helper()
	V := len(logits)
	args, err := sampleArgs(sp, V)
	if err != nil {
		t.Fatal(err)
	}
	var got int32
	err = g.do(func() error {
		var owned []uint64
		defer func() {
			for _, a := range owned {
				g.free(a)
			}
		}()
		put := func(b []byte) (uint64, error) {
			a, err := g.alloc(int64(len(b)))
			if err == nil {
				owned = append(owned, a)
				err = g.upload(a, b)
			}
			return a, err
		}
		i32 := func(v []int32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }
		var err error
		if args.Logits, err = put(unsafe.Slice((*byte)(unsafe.Pointer(&logits[0])), 4*V)); err != nil {
			return err
		}
		counts := make([]int32, V)
		for _, id := range history[:len(history)-1] {
			counts[id]++
		}
		penalised := sp.Params.PresencePenalty != 0 || sp.Params.FrequencyPenalty != 0
		var countsAddr uint64
		if countsAddr, err = put(i32(counts)); err != nil {
			return err
		}
		if penalised {
			args.Counts = countsAddr
		}
		if args.In, err = put(i32([]int32{history[len(history)-1]})); err != nil {
			return err
		}
		if args.Step, err = put(i32([]int32{int32(draw)})); err != nil {
			return err
		}
		if args.Out, err = put(i32([]int32{-1})); err != nil {
			return err
		}
		l, err := g.newLaunch(kernels.KernelSample, [3]int{1, 1, 1}, kernels.SampleThreads, &args, unsafe.Pointer(&args))
		if err != nil {
			return err
		}
		if err := g.run(l); err != nil {
			return err
		}
		out := make([]int32, 1)
		if err := g.download(i32(out), args.Out); err != nil {
			return err
		}
		got = out[0]
		after := make([]int32, V)
		if err := g.download(i32(after), countsAddr); err != nil {
			return err
		}
		in := history[len(history)-1]
		if penalised && after[in] != counts[in]+1 {
			t.Errorf("the kernel left count %d of its input token %d, want %d", after[in], in, counts[in]+1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The sample kernel picks what exec.Sampler picks, draw for draw, for every knob the
// server offers: the same seed, draw counter and logits give the same token. Logits on a
// grid of quarters make ties at the argmax and at the top-k threshold (broken by the
// lower id in both; with equal logits only the lowest ids are candidates); the flat case has a nucleus larger than TopPCandidates; the last
// case is the model's vocabulary.
func TestSampleKernelMatchesHostSampler(t *testing.T) {
	g := openGPU(t)
	if kernels.SampleCandidates != exec.TopPCandidates {
		t.Fatalf("the kernel sorts %d top-p candidates, the host sampler %d", kernels.SampleCandidates, exec.TopPCandidates)
	}
	cases := []struct {
		name   string
		p      exec.SamplingParams
		V      int
		ties   bool
		scale  float64
		trials int
	}{
		{"greedy ties", exec.SamplingParams{}, 5000, true, 3, 4},
		{"greedy ties, odd vocabulary", exec.SamplingParams{}, 4999, true, 3, 4},
		{"greedy ties, vocabulary 248320", exec.SamplingParams{}, 248320, true, 3, 3},
		{"greedy, equal logits, vocabulary 248320", exec.SamplingParams{}, 248320, true, 0, 2},
		{"greedy penalties", exec.SamplingParams{PresencePenalty: 0.5, FrequencyPenalty: 2}, 5000, true, 3, 6},
		{"temperature", exec.SamplingParams{Temperature: 0.8}, 5000, false, 3, 8},
		{"top-k ties", exec.SamplingParams{Temperature: 1, TopK: 40}, 5000, true, 3, 8},
		{"top-k 1", exec.SamplingParams{Temperature: 1, TopK: 1}, 3000, true, 3, 3},
		{"top-k of equal logits", exec.SamplingParams{Temperature: 1, TopK: 3}, 3000, true, 0, 16},
		{"top-p", exec.SamplingParams{Temperature: 1, TopP: 0.9}, 5000, false, 3, 8},
		{"top-p ties", exec.SamplingParams{Temperature: 0.7, TopP: 0.5}, 3000, true, 2, 8},
		{"top-p past the candidate cap", exec.SamplingParams{Temperature: 2, TopP: 0.99}, 6000, false, 0.5, 4},
		{"min-p", exec.SamplingParams{Temperature: 1, MinP: 0.05}, 5000, false, 3, 8},
		{"every knob", exec.SamplingParams{Temperature: 1.2, TopK: 200, TopP: 0.95, MinP: 0.02, PresencePenalty: 0.7, FrequencyPenalty: 0.2}, 5000, false, 3, 8},
		{"vocabulary 248320 top-p", exec.SamplingParams{Temperature: 1, TopP: 0.95}, 248320, false, 4, 2},
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for trial := range c.trials {
				logits := make([]float32, c.V)
				for i := range logits {
					x := r.NormFloat64() * c.scale
					if c.ties {
						x = math.Round(x*4) / 4
					}
					logits[i] = float32(x)
				}
				logits[r.IntN(c.V)] = float32(math.Inf(-1))
				history := make([]int32, 1+r.IntN(20))
				for i := range history {
					history[i] = int32(r.IntN(min(c.V, 64)))
				}
				// Penalties must bite: the history holds the current favourite, twice when
				// it can (frequency).
				history[0] = int32(argmaxOf(logits))
				if len(history) > 2 {
					history[1] = history[0]
				}
				seed := int64(trial*7919 + 3)
				p := c.p
				p.Seed = &seed
				draw := 1 + trial*5
				host := exec.NewSampler(p)
				host.Skip(draw)
				want := host.Sample(logits, history)
				got := deviceSample(t, g, logits, history, draw, exec.DeviceSampling{Params: p, Seed: uint64(seed)})
				if got != want {
					t.Errorf("trial %d: the kernel picked %d (logit %v), the host sampler %d (logit %v)", trial, got, logits[got], want, logits[want])
				}
			}
		})
	}
}

func argmaxOf(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
