package ops

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

// attnCase is one attention call: T query tokens after C cached ones.
type attnCase struct {
	T, C, NH, KVH, D int
	dt               graph.DType
}

// runAttention fills a cache of C+T rows and runs the attention reference with kernels
// ("reference" for the scalar oracle) over workers goroutines.
func runAttention(t *testing.T, c attnCase, seed int64, kernels string, workers int) []float32 {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	N := c.C + c.T + 3
	q := randTensor(rng, 1, c.T, c.NH, c.D)
	kc, vc := randTensor(rng, 1, N, c.KVH, c.D), randTensor(rng, 1, N, c.KVH, c.D)
	if c.dt == graph.BF16 {
		kc, vc = toBF16(kc), toBF16(vc)
	}
	v := &graph.Value{Op: "attention", Attrs: graph.Attrs{"scale": 1 / math.Sqrt(float64(c.D))}}
	out := NewTensor(graph.F32, c.T, c.NH, c.D)
	env := &Env{Bind: graph.Bindings{T: c.T, C: c.C, N: N}, Workers: workers, Kernels: kernels}
	if err := refAttention(env, v, []*Tensor{q, kc, vc}, []*Tensor{out}); err != nil {
		t.Fatal(err)
	}
	return out.F32()
}

// TestTiledAttentionMatchesReference: every kernel set this machine has against the
// scalar oracle, over GQA ratios, head dims, prompts that cross key blocks and the
// causal diagonal at every offset, decode at long contexts (split key ranges), bf16
// caches, and worker counts.
func TestTiledAttentionMatchesReference(t *testing.T) {
	cases := []attnCase{
		{T: 1, C: 0, NH: 8, KVH: 1, D: 64},
		{T: 1, C: 5000, NH: 16, KVH: 2, D: 256},
		{T: 1, C: 8191, NH: 8, KVH: 1, D: 64},
		{T: 7, C: 0, NH: 8, KVH: 1, D: 64},
		{T: 7, C: 100, NH: 4, KVH: 4, D: 32},
		{T: 32, C: 63, NH: 16, KVH: 2, D: 256},
		{T: 130, C: 0, NH: 6, KVH: 2, D: 16},
		{T: 70, C: 1000, NH: 8, KVH: 1, D: 64},
		{T: 2, C: 3000, NH: 12, KVH: 4, D: 48},
		{T: 5, C: 300, NH: 8, KVH: 2, D: 64, dt: graph.BF16},
		{T: 1, C: 2000, NH: 16, KVH: 2, D: 128, dt: graph.BF16},
		{T: 1, C: 3000, NH: 8, KVH: 1, D: 64, dt: graph.BF16},
		{T: 9, C: 130, NH: 2, KVH: 1, D: 32, dt: graph.BF16},
		// A prefill chunk across blocks, a head dim whose value sums the AVX-512 set
		// leaves to AVX2 (D%32 != 0), four KV heads.
		{T: 32, C: 63, NH: 16, KVH: 2, D: 256, dt: graph.BF16},
		{T: 130, C: 0, NH: 6, KVH: 2, D: 16, dt: graph.BF16},
		{T: 2, C: 3000, NH: 12, KVH: 4, D: 48, dt: graph.BF16},
		// Rows long enough to be fetched ahead whose bf16 halves are no multiple of 16
		// floats.
		{T: 1, C: 700, NH: 4, KVH: 2, D: 272, dt: graph.BF16},
	}
	old := attnFast
	defer func() { attnFast = old }()
	for ci, c := range cases {
		want := runAttention(t, c, int64(ci), KernelsReference, 1)
		for _, k := range attnKernelSets {
			attnFast = k
			for _, workers := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/T%d_C%d_H%dx%d_D%d_%v_w%d", k.name, c.T, c.C, c.NH, c.KVH, c.D, c.dt, workers), func(t *testing.T) {
					got := runAttention(t, c, int64(ci), KernelsFast, workers)
					if k.order(c.dt, c.D) != orderDot {
						// Float32 sums in another order and a polynomial exp: relative 1e-5
						// of the output scale (values are averages of unit normals).
						near(t, "attention", got, want, 2e-5)
						return
					}
					// bf16 products. Against "go-bf16" over the same key ranges (the
					// workers split the keys, and each range's probabilities are rounded
					// against its own maximum): float32 sums in another order, and an exp2
					// that may differ from the Go one in a last bit, which can round a
					// probability to the neighbouring bf16 (TestAttnDotKernelsMatchGo
					// holds the kernels themselves closer). Against the scalar oracle: the
					// roundings of q and p themselves, about 2^-9 of the output's scale by
					// rms on these cases and up to 1.3% of it at single outputs.
					attnFast = goDotAttnKernels
					wantDot := runAttention(t, c, int64(ci), KernelsFast, workers)
					attnFast = k
					near(t, "attention (go-bf16)", got, wantDot, 5e-4)
					near(t, "attention", got, want, 3e-3)
				})
			}
		}
	}
}

// fastestDotAttnKernels is the last set of this machine with bf16 products other than the
// portable one, or nil.
func fastestDotAttnKernels() *attnKernels {
	var dot *attnKernels
	for _, k := range attnKernelSets {
		if k.scoresDot != nil && k != goDotAttnKernels {
			dot = k
		}
	}
	return dot
}

// TestExp2f: the polynomial exp against math.Exp2 over the range softmax uses, and 0
// below the masking threshold.
func TestExp2f(t *testing.T) {
	for x := float32(-125); x <= 0; x += 0.0137 {
		want := math.Exp2(float64(x))
		if got := float64(exp2f(x)); math.Abs(got-want) > 3e-7*want {
			t.Fatalf("exp2f(%v) = %v, want %v", x, got, want)
		}
	}
	if exp2f(-126) != 0 || exp2f(float32(math.Inf(-1))) != 0 {
		t.Error("exp2f below -125 is not 0")
	}
}

// BenchmarkAttention measures attention at the tiny synthetic model's shapes (8 query
// heads on 1 KV head of 64) and the 35B-A3B's (16 on 2 of 256): decode at long contexts
// and a prefill chunk, reference and tiled, on 2 workers. SetBytes is the KV rows read.
// The "rotating" case cycles through four caches (67 MB at 4,096 keys, more than the L3),
// as a decode step's ten attention layers do, so its rows come from memory.
func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct {
		name string
		attnCase
		caches int
	}{
		{"tiny/decode-8192", attnCase{T: 1, C: 8192, NH: 8, KVH: 1, D: 64}, 1},
		{"tiny/decode-8192-rotating", attnCase{T: 1, C: 8192, NH: 8, KVH: 1, D: 64}, 8},
		{"tiny/decode-8192-two-layers", attnCase{T: 1, C: 8192, NH: 8, KVH: 1, D: 64}, 2},
		{"tiny/decode-8192-two-layers-bf16", attnCase{T: 1, C: 8192, NH: 8, KVH: 1, D: 64, dt: graph.BF16}, 2},
		{"tiny/prefill-512-at-16384", attnCase{T: 512, C: 16384, NH: 8, KVH: 1, D: 64}, 1},
		{"full/decode-4096", attnCase{T: 1, C: 4096, NH: 16, KVH: 2, D: 256}, 1},
		{"full/decode-4096-rotating", attnCase{T: 1, C: 4096, NH: 16, KVH: 2, D: 256}, 4},
		{"full/decode-4096-rotating-bf16", attnCase{T: 1, C: 4096, NH: 16, KVH: 2, D: 256, dt: graph.BF16}, 4},
		// Forty layers' worth: 336 MB of caches, more than the L3, as in a decode step whose
		// weights stream through the caches between attention layers.
		{"full/decode-4096-memory-bf16", attnCase{T: 1, C: 4096, NH: 16, KVH: 2, D: 256, dt: graph.BF16}, 40},
		{"full/decode-4096-memory", attnCase{T: 1, C: 4096, NH: 16, KVH: 2, D: 256}, 20},
		{"full/decode-256", attnCase{T: 1, C: 256, NH: 16, KVH: 2, D: 256}, 1},
		{"full/prefill-512", attnCase{T: 512, C: 0, NH: 16, KVH: 2, D: 256}, 1},
		{"full/prefill-512-bf16", attnCase{T: 512, C: 0, NH: 16, KVH: 2, D: 256, dt: graph.BF16}, 1},
		{"tiny/prefill-512-at-16384-bf16", attnCase{T: 512, C: 16384, NH: 8, KVH: 1, D: 64, dt: graph.BF16}, 1},
	} {
		rng := rand.New(rand.NewSource(1))
		N := c.C + c.T
		q := randTensor(rng, 1, c.T, c.NH, c.D)
		var kcs, vcs []*Tensor
		for range c.caches {
			kc, vc := randTensor(rng, 1, N, c.KVH, c.D), randTensor(rng, 1, N, c.KVH, c.D)
			if c.dt == graph.BF16 {
				kc, vc = toBF16(kc), toBF16(vc)
			}
			kcs, vcs = append(kcs, kc), append(vcs, vc)
		}
		v := &graph.Value{Op: "attention", Attrs: graph.Attrs{"scale": 0.125}}
		out := NewTensor(graph.F32, c.T, c.NH, c.D)
		flops := costAttention(&graph.Value{Args: []*graph.Value{{Type: graph.TensorType(graph.F32, graph.D(c.T), graph.D(c.NH), graph.D(c.D))},
			{Type: graph.TensorType(graph.F32, graph.N, graph.D(c.KVH), graph.D(c.D))}}, Type: graph.TensorType(graph.F32, graph.D(c.T), graph.D(c.NH), graph.D(c.D))},
			graph.Bindings{T: c.T, C: c.C, N: N}).Flops
		// A bf16 cache runs with bf16 products too ("fast-dot"), where the machine has them.
		variants := []string{KernelsFast, KernelsReference}
		dot := fastestDotAttnKernels()
		if c.dt == graph.BF16 && dot != nil {
			variants = append(variants, "fast-dot")
		}
		for _, variant := range variants {
			kernels := variant
			if kernels == KernelsReference && c.T > 1 {
				continue // minutes per run
			}
			b.Run(c.name+"/"+variant, func(b *testing.B) {
				if variant == "fast-dot" {
					kernels = KernelsFast
					old := attnFast
					attnFast = dot
					defer func() { attnFast = old }()
				}
				env := &Env{Bind: graph.Bindings{T: c.T, C: c.C, N: N}, Workers: 2, Kernels: kernels}
				b.SetBytes(int64(2 * N * c.KVH * c.D * kcs[0].DType.Bits() / 8))
				i := 0
				cpu0 := processCPU()
				for b.Loop() {
					if err := refAttention(env, v, []*Tensor{q, kcs[i], vcs[i]}, []*Tensor{out}); err != nil {
						b.Fatal(err)
					}
					i = (i + 1) % c.caches
				}
				b.ReportMetric(float64(flops)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				// The process's CPU time per call: on a machine shared with other work, less
				// moved by time slicing than the wall time (it still counts their cache misses).
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestAttnKernelsMatchGo: each kernel set's inner loops against the portable ones, over
// row counts (8: decode's query heads of one KV head; 16 and 32: the 16-lane paths; 24
// the rest), key counts (odd ones take the AVX-512 exponential's last-key path, fewer
// than 4 the score kernel's one-key loop) and head dims (D%32 != 0 takes the AVX2
// value sums under avx512), within float32 rounding of their
// sums (relative 1e-6 per term).
func TestAttnKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	randf := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	for _, k := range attnKernelSets {
		for _, nq := range []int{8, 16, 24, 32} {
			for _, nk := range []int{1, 2, 3, 5, 64} {
				for _, D := range []int{16, 48, 64, 256} {
					stride := 2 * D // two KV heads side by side
					q, kv := randf(nq*D), randf((nk-1)*stride+D)
					want, got := make([]float32, nk*nq), make([]float32, nk*nq)
					scoresGo(q, nq, D, kv, stride, nk, want)
					k.scores(q, nq, D, kv, stride, nk, got)
					near(t, k.name+" scores", got, want, 1e-6*float64(D))

					m, l := make([]float32, nq), randf(nq)
					for i := range m {
						m[i] = float32(math.Inf(-1))
					}
					wm, wl, gm, gl := append([]float32(nil), m...), append([]float32(nil), l...), append([]float32(nil), m...), append([]float32(nil), l...)
					rowMaxGo(want, nq, nk, wm)
					k.rowMax(want, nq, nk, gm)
					near(t, k.name+" rowMax", gm, wm, 0)
					copy(got, want)
					exp2SumGo(want, nq, nk, wm, wl)
					k.exp2Sum(got, nq, nk, wm, gl)
					near(t, k.name+" exp2Sum", got, want, 1e-6)
					near(t, k.name+" exp2Sum l", gl, wl, 1e-6*float64(nk))

					o := randf(nq * D)
					wo, gop := append([]float32(nil), o...), append([]float32(nil), o...)
					// Ahead names the other head's rows (the kernels that fetch them must
					// not change what they sum).
					accumGo(want, nq, D, kv, stride, nk, wo, attnAhead{})
					k.accum(want, nq, D, kv, stride, nk, gop, aheadOf(kv, kv[D:], kv[D:]))
					near(t, k.name+" accum", gop, wo, 1e-6*float64(nk))
				}
			}
		}
	}
}

// pairOrder returns packed rows (nq rows of D) in pair order: in each run of 16 dims the
// even ones in the first chunk, the odd ones in the second.
func pairOrder(x []float32, nq, D int) []float32 {
	out := make([]float32, len(x))
	for i := 0; i < nq; i++ {
		base := (i/4)*4*D + (i%4)*8
		for d := 0; d < D; d++ {
			from := base + (d/8)*32 + d%8
			to := base + (d/16)*64 + (d%2)*32 + (d%16)/2
			out[to] = x[from]
		}
	}
	return out
}

// TestAttnBF16KernelsMatchFloat32: each set's in-place bf16 kernels against the portable
// float32 ones over the same rows widened, q and o in pair order, over the shapes of
// TestAttnKernelsMatchGo (D%32 != 0 takes the AVX2 value sums under avx512).
func TestAttnBF16KernelsMatchFloat32(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	randf := func(n int) []float32 { return randF32(rng, n, 1) }
	for _, k := range attnKernelSets {
		for _, nq := range []int{8, 16, 24, 32} {
			for _, nk := range []int{1, 2, 3, 5, 64} {
				for _, D := range []int{16, 48, 64, 256} {
					stride := 2 * D // two KV heads side by side
					q := randf(nq * D)
					kv16 := make([]uint16, (nk-1)*stride+D)
					kv := make([]float32, len(kv16))
					for i := range kv16 {
						kv16[i] = F32ToBF16(float32(rng.NormFloat64()))
						kv[i] = BF16ToF32(kv16[i])
					}
					want, got := make([]float32, nk*nq), make([]float32, nk*nq)
					scoresGo(q, nq, D, kv, stride, nk, want)
					k.scoresBF16(pairOrder(q, nq, D), nq, D, kv16, stride, nk, got)
					near(t, k.name+" scoresBF16", got, want, 1e-6*float64(D))

					p, o := randf(nk*nq), randf(nq*D)
					wo := append([]float32(nil), o...)
					gop := pairOrder(o, nq, D)
					accumGo(p, nq, D, kv, stride, nk, wo, attnAhead{})
					k.accumBF16(p, nq, D, kv16, stride, nk, gop, aheadOf(kv16, kv16[D:], kv16[D:]))
					near(t, k.name+" accumBF16", gop, pairOrder(wo, nq, D), 1e-6*float64(nk))
				}
			}
		}
	}
}

// dotOrder returns packed output rows (nq rows of D) in dot order (dotOutDim).
func dotOrder(x []float32, nq, D int) []float32 {
	out := make([]float32, len(x))
	for i := 0; i < nq; i++ {
		base := (i/4)*4*D + (i%4)*8
		for c := 0; c < D; c += 8 {
			for e := 0; e < 8; e++ {
				d := c&^31 + dotOutDim(c/8%4, e)
				out[base+c*4+e] = x[base+(d/8)*32+d%8]
			}
		}
	}
	return out
}

// TestAttnDotKernelsMatchGo: each set's bf16-product kernels against the portable float32
// ones over the same bf16 values widened (a product of two bf16 is exact in float32, so
// only the order of the sums differs), and the probability pairs bit for bit against
// pairProbsGo (F32ToBF16 rounds to nearest even, as VCVTNEPS2BF16 does).
func TestAttnDotKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	bf16s := func(n int) ([]uint16, []float32) {
		h, f := make([]uint16, n), make([]float32, n)
		for i := range h {
			h[i] = F32ToBF16(float32(rng.NormFloat64()))
			f[i] = BF16ToF32(h[i])
		}
		return h, f
	}
	ran := false
	for _, k := range attnKernelSets {
		if k.scoresDot == nil {
			continue
		}
		ran = true
		for _, nq := range []int{8, 16, 24, 32} {
			for _, nk := range []int{1, 2, 3, 5, 64} {
				for _, D := range []int{32, 64, 256} {
					stride := 2 * D // two KV heads side by side
					kv16, kv := bf16s((nk-1)*stride + D)
					q16, q := bf16s(nq * D)
					qp := make([]uint16, nq*D) // packQueriesBF16's layout
					for i := 0; i < nq; i++ {
						for d := 0; d < D; d++ {
							qp[(i/4)*4*D+(i%4)*16+(d/16)*64+d%16] = q16[i*D+d]
						}
					}
					qf := make([]float32, nq*D) // scoresGo's
					for i := 0; i < nq; i++ {
						for d := 0; d < D; d++ {
							qf[(i/4)*4*D+(i%4)*8+(d/8)*32+d%8] = q[i*D+d]
						}
					}
					want, got := make([]float32, nk*nq), make([]float32, nk*nq)
					scoresGo(qf, nq, D, kv, stride, nk, want)
					k.scoresDot(qp, nq, D, kv16, stride, nk, got)
					near(t, k.name+" scoresDot", got, want, 1e-6*float64(D))

					p := randF32(rng, nk*nq, 1)
					p[0], p[len(p)-1] = 0, 1+1.0/256 // zero, and a tie that rounds to even
					wpp, gpp := make([]uint32, (nk+1)/2*nq), make([]uint32, (nk+1)/2*nq)
					pairProbsGo(p, nq, nk, wpp)
					k.pairProbs(p, nq, nk, gpp)
					for i := range wpp {
						if gpp[i] != wpp[i] {
							t.Fatalf("%s pairProbs nq %d nk %d: pair %d = %#x, want %#x", k.name, nq, nk, i, gpp[i], wpp[i])
						}
					}
					pw := make([]float32, nk*nq) // the pairs' probabilities widened
					for j := 0; j < nk; j++ {
						for i := 0; i < nq; i++ {
							pw[j*nq+i] = BF16ToF32(uint16(wpp[j/2*nq+i] >> (16 * (j % 2))))
						}
					}
					o := randF32(rng, nq*D, 1)
					wo := append([]float32(nil), o...)
					gop := dotOrder(o, nq, D)
					accumGo(pw, nq, D, kv, stride, nk, wo, attnAhead{})
					k.accumDot(wpp, nq, D, kv16, stride, nk, gop, aheadOf(kv16, kv16[D:], kv16[D:]))
					near(t, k.name+" accumDot", gop, dotOrder(wo, nq, D), 1e-6*float64(nk))
				}
			}
		}
	}
	if !ran {
		t.Fatal("no kernel set with bf16 products (go-bf16 is on every machine)")
	}
}

// TestSetAttentionKernel: every set this machine has can be chosen by name, "" is the
// fastest, and an unknown name is an error that lists the machine's.
func TestSetAttentionKernel(t *testing.T) {
	old := attnFast
	defer func() { attnFast = old }()
	for _, k := range attnKernelSets {
		if err := SetAttentionKernel(k.name); err != nil || AttentionKernel() != k.name {
			t.Errorf("SetAttentionKernel(%q): %v, in use %q", k.name, err, AttentionKernel())
		}
	}
	if err := SetAttentionKernel(""); err != nil || attnFast != attnKernelSets[len(attnKernelSets)-1] {
		t.Errorf(`SetAttentionKernel(""): %v, in use %q`, err, AttentionKernel())
	}
	if err := SetAttentionKernel("avx9"); err == nil || !strings.Contains(err.Error(), "go") {
		t.Errorf("SetAttentionKernel(avx9): %v", err)
	}
}
