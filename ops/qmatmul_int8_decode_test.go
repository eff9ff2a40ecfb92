package ops

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"

	"pistil/graph"
)

// Tests of the one-row int8 kernels (decode under activations = "int8-all").

// The portable row kernel is q4Int8Dot8Go's sum for one activation row, and every row
// kernel of this machine (AVX-512 VNNI, AVX2) gives the portable one's result (1..5
// blocks, odd row counts and runs longer than int8RowRun: rows back to back, as the
// weights store them), to float32 summation order.
func TestInt8RowKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	for name := range int8RowKernelSets {
		t.Logf("row kernel %s", name)
	}
	for blocks := 1; blocks <= 5; blocks++ {
		G := blocks * int8Groups
		K := G * int8Group
		for _, rows := range []int{1, 3, 7, 65, 70} {
			w := quantize(randTensor(rng, 0.1, rows, K), 4, int8Group)
			codes, scales, biases := w.Data, u16(w.Scales), u16(w.Biases)
			acts := make([]byte, int8RowBytes(G))
			quantizeInt8Row(randF32(rng, K, 1), G, acts)
			want := make([]float32, rows)
			q4Int8Dot1Go(codes, scales, biases, blocks, acts, want)

			// The block kernel's oracle on the same row, the activation row repeated.
			eight := make([]byte, int8RowsPerDot*len(acts))
			for p := 0; p < int8RowsPerDot; p++ {
				copy(eight[p*len(acts):], acts)
			}
			rowBytes, rowGroups := blocks*int8CodeBytes, blocks*int8Groups
			for r := 0; r < rows; r++ {
				var block [8]float32
				q4Int8Dot8Go(codes[r*rowBytes:], scales[r*rowGroups:], biases[r*rowGroups:], blocks, eight, len(acts), &block)
				if d := math.Abs(float64(block[0] - want[r])); d > 1e-5*math.Max(1, math.Abs(float64(want[r]))) {
					t.Fatalf("blocks=%d row %d: q4Int8Dot1Go %v, q4Int8Dot8Go %v", blocks, r, want[r], block[0])
				}
			}
			for name, kernel := range int8RowKernelSets {
				got := make([]float32, rows)
				kernel(codes, scales, biases, blocks, acts, got)
				for r := range got {
					if d := math.Abs(float64(got[r] - want[r])); d > 1e-5*math.Max(1, math.Abs(float64(want[r]))) {
						t.Fatalf("%s blocks=%d rows=%d row %d: %v, want %v", name, blocks, rows, r, got[r], want[r])
					}
				}
			}
		}
	}
}

// The row kernels' integer part is exact, saturating extremes included: with unit scales,
// zero biases and integer activations whose every group reaches ±127 (an activation
// scale of exactly 1), each returns the exact integer Σ q·x for weight rows of random
// codes, all 15s (every 16-bit lane of the AVX2 kernel's VPMADDUBSW sums at its largest,
// 8·2·15·127 = 30,480, against activations all +127 or all -127) and alternating 0/15
// nibbles.
func TestInt8RowKernelIntegerPartExact(t *testing.T) {
	rng := rand.New(rand.NewSource(34))
	const blocks, rows = 3, 3
	G := blocks * int8Groups
	K := G * int8Group
	codes := make([]byte, rows*K/2)
	for i := 0; i < K/2; i++ {
		codes[i], codes[K/2+i], codes[K+i] = byte(rng.Intn(256)), 0xff, 0xf0
	}
	one := F32ToBF16(1)
	scales, biases := make([]uint16, rows*G), make([]uint16, rows*G)
	for g := range scales {
		scales[g] = one
	}
	random := make([]float32, K)
	for i := range random {
		random[i] = float32(rng.Intn(255) - 127)
	}
	for g := 0; g < G; g++ {
		random[g*int8Group+rng.Intn(int8Group)] = float32(127 * (1 - 2*rng.Intn(2)))
	}
	plus, minus := make([]float32, K), make([]float32, K)
	for i := range plus {
		plus[i], minus[i] = 127, -127
	}
	for _, x := range [][]float32{random, plus, minus} {
		acts := make([]byte, int8RowBytes(G))
		quantizeInt8Row(x, G, acts)
		var want [rows]int64
		for r := range want {
			for i, v := range x {
				want[r] += int64(codes[r*K/2+i/2]>>(4*(i%2))&15) * int64(v)
			}
		}
		for name, kernel := range int8RowKernelSets {
			got := make([]float32, rows)
			kernel(codes, scales, biases, blocks, acts, got)
			for r := range got {
				if int64(got[r]) != want[r] || float32(int64(got[r])) != got[r] {
					t.Fatalf("%s, activations from %v: weight row %d = %v, want exactly %d", name, x[:2], r, got[r], want[r])
				}
			}
		}
	}
}

// Decode's matmuls under "int8-all" are the product of the rounded activation row with
// the weights (qmatmul and the routed experts' expert_qmatmul, rows in runs longer than
// the row kernel's and strided stacks), with every int8 kernel of the machine (each has a
// row kernel: VNNI, AVX2, go), rows of whole blocks and rows ending in a partial one
// (G = 3: no whole block; G = 11: one whole block and a partial one).
func TestInt8DecodeIsProductOfRoundedActivations(t *testing.T) {
	rng := rand.New(rand.NewSource(32))
	env := &Env{Workers: 2, Kernels: KernelsFast, Activations: ActivationsInt8All}
	for _, G := range []int{3, 8, 11, 32} {
		K := G * int8Group
		const E, M, k = 5, 150, 3
		w, ref, x, ids, ge := decodeExpertCase(t, rng, E, M, G, []int32{4, 0, 2})
		rounded := roundedActs(x.F32())
		infoE, _ := Default.Info("expert_qmatmul")
		forEachInt8Kernel(t, func(name string) {
			if int8RowKernel == nil {
				t.Fatalf("int8 kernel %s has no row kernel", name)
			}
			acts := rounded
			got := NewTensor(graph.F32, 1, k, M)
			if err := infoE.Ref(env, ge.Values[3], []*Tensor{x, w, ids}, []*Tensor{got}); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < k; j++ {
				e := int(ids.I32()[j])
				wE := ref[e*M*K : (e+1)*M*K]
				want := naiveMatmul(acts, wE, K)
				for m, v := range got.F32()[j*M : (j+1)*M] {
					var mag float64
					for i := 0; i < K; i++ {
						mag += math.Abs(float64(x.F32()[i]) * float64(wE[m*K+i]))
					}
					if d := math.Abs(float64(v - want[m])); d > 1e-6*mag {
						t.Fatalf("%s G=%d expert %d row %d = %v, want %v: |diff| %.3g > %.3g",
							name, G, e, m, v, want[m], d, 1e-6*mag)
					}
				}
			}
			// The same expert as a plain matmul (its slice of the stack as a matrix).
			wq := &Tensor{DType: w.DType, Shape: []int{M, K}, Group: w.Group,
				Data:   w.Data[2*M*K/2 : 3*M*K/2],
				Scales: w.Scales[2*M*G*2 : 3*M*G*2], Biases: w.Biases[2*M*G*2 : 3*M*G*2]}
			g2, err := opGraph("qmatmul", nil, x, wq)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := Default.Info("qmatmul")
			out := NewTensor(graph.F32, 1, M)
			if err := info.Ref(env, g2.Values[2], []*Tensor{x, wq}, []*Tensor{out}); err != nil {
				t.Fatal(err)
			}
			for m, v := range out.F32() {
				if math.Abs(float64(v-got.F32()[2*M+m])) > 1e-6*math.Abs(float64(v)) {
					t.Fatalf("%s G=%d: qmatmul row %d = %v, expert_qmatmul of the same expert %v", name, G, m, v, got.F32()[2*M+m])
				}
			}
		})
	}
}

// decodeExpertCase is a decode step's routed-expert matmul for the decode tests: a stack of
// E experts of M q4 rows of G groups (w, and its rows decoded, ref), one activation row x
// with an outlier per group (as real rows have), routed to the experts routed (ids), and
// the expert_qmatmul graph of the three.
func decodeExpertCase(t *testing.T, rng *rand.Rand, E, M, G int, routed []int32) (w *Tensor, ref []float32, x, ids *Tensor, ge *graph.Graph) {
	t.Helper()
	K := G * int8Group
	w = quantize(randTensor(rng, 0.1, E, M, K), 4, int8Group)
	ref = rowsOf(w)
	x = randTensor(rng, 1, 1, K)
	for g := 0; g < G; g++ {
		x.F32()[g*int8Group+rng.Intn(int8Group)] *= 8
	}
	ids = NewTensor(graph.I32, 1, len(routed))
	copy(ids.I32(), routed)
	ge, err := opGraph("expert_qmatmul", nil, x, w, ids)
	if err != nil {
		t.Fatal(err)
	}
	return w, ref, x, ids, ge
}

// BenchmarkInt8RowKernel times each one-row kernel alone on one core, side by side with
// the float32 one-row kernels decode runs under "f32" (f32/avx2 is what a machine without
// AVX-512 decodes with): l2, 256 q4 rows of 2048 (in the L2 cache); stream, 2^17 rows of
// 2048 (151 MB, several times the L3 cache) swept in order, as decode streams a matrix
// from memory (not the portable kernels: they are far below memory speed). MB/s is
// weight bytes (codes, scales, biases) per second.
//
//	go test ./ops/ -run X -bench Int8RowKernel
func BenchmarkInt8RowKernel(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const K = 2048
	G := K / int8Group
	x := randF32(rng, K, 1)
	acts := make([]byte, int8RowBytes(G))
	quantizeInt8Row(x, G, acts)
	out := make([]float32, int8RowRun)
	forRowKernelSizes(b, rng, K, func(size string, M int, wt *Tensor, w weightRows) {
		for _, ks := range quantKernelSets {
			if ks == goQuantKernels {
				continue
			}
			one := actsWith(ks, w, x, 1)
			b.Run(size+"/f32-"+ks.name, func(b *testing.B) {
				b.SetBytes(int64(len(wt.Data) + len(wt.Scales) + len(wt.Biases)))
				for b.Loop() {
					for r := 0; r < M; r++ {
						data, scales, biases := w.locate(r)
						ks.dot1[0](data, scales, biases, int8Group, one.x, one.xsum)
					}
				}
			})
		}
		for _, name := range int8RowKernelNames() {
			if size == "stream" && name == "go" {
				continue
			}
			kernel := int8RowKernelSets[name]
			b.Run(size+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(wt.Data) + len(wt.Scales) + len(wt.Biases)))
				rowBytes, rowGroups := K/2, G
				for b.Loop() {
					for r := 0; r < M; r += int8RowRun {
						kernel(wt.Data[r*rowBytes:(r+int8RowRun)*rowBytes], u16(wt.Scales)[r*rowGroups:(r+int8RowRun)*rowGroups],
							u16(wt.Biases)[r*rowGroups:(r+int8RowRun)*rowGroups], G/int8Groups, acts, out)
					}
				}
			})
		}
	})
}

// forRowKernelSizes calls body with the row benchmarks' random q4 weights of rows of K:
// l2, 256 rows (in the L2 cache); stream, 2^17 rows (151 MB at K = 2,048, several times
// the L3 cache), swept in order as decode streams a matrix from memory.
func forRowKernelSizes(b *testing.B, rng *rand.Rand, K int, body func(size string, M int, wt *Tensor, w weightRows)) {
	for _, size := range []struct {
		name string
		M    int
	}{{"l2", 256}, {"stream", 1 << 17}} {
		wt := randQuantized(rng, 4, int8Group, size.M, K)
		w, err := newWeightRows(wt)
		if err != nil {
			b.Fatal(err)
		}
		body(size.name, size.M, wt, w)
	}
}

// int8RowKernelNames lists the row kernels of this machine, sorted.
func int8RowKernelNames() []string {
	var names []string
	for name := range int8RowKernelSets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// BenchmarkQMatmulStreamInt8 is BenchmarkQMatmulStream with activations = "int8-all":
// a decode-shaped q4 qmatmul whose weights come from memory, on one and two workers.
func BenchmarkQMatmulStreamInt8(b *testing.B) {
	var envs []namedEnv
	for _, act := range []string{ActivationsF32, ActivationsInt8All} {
		for _, workers := range []int{1, 2} {
			envs = append(envs, namedEnv{fmt.Sprintf("%s/workers=%d", act, workers), &Env{Workers: workers, Kernels: KernelsFast, Activations: act}})
		}
	}
	benchQMatmulStream(b, envs)
}

// The vector quantizer (quantizeGroupFast) writes the bytes the Go loop writes: rows of
// random activations with an outlier per group, all-zero groups, values that land on
// halves of a step (rounded to even), tiny and huge magnitudes, partial last blocks.
func TestQuantizeInt8GroupFastMatchesGo(t *testing.T) {
	if len(int8Quantizers) == 0 {
		t.Skip("no vector quantizer on this machine: the Go loop runs")
	}
	saved := quantizeGroupFast
	defer func() { quantizeGroupFast = saved }()
	for _, name := range int8QuantizerNames() {
		t.Run(name, func(t *testing.T) { quantizeGroupMatchesGo(t, int8Quantizers[name]) })
	}
}

// int8QuantizerNames lists the vector quantizers of this machine, sorted.
func int8QuantizerNames() []string {
	var names []string
	for name := range int8Quantizers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// quantizeGroupMatchesGo is TestQuantizeInt8GroupFastMatchesGo for one vector quantizer.
func quantizeGroupMatchesGo(t *testing.T, fast func(xs []float32, block []byte, j int)) {
	rng := rand.New(rand.NewSource(33))
	for _, G := range []int{1, 8, 11, 32} {
		x := randF32(rng, G*int8Group, 3)
		for g := 0; g < G; g++ {
			x[g*int8Group+rng.Intn(int8Group)] *= 9
		}
		clear(x[0:int8Group]) // an all-zero group
		if G > 1 {
			// Steps of 1 (max|x| = 127) with halves: 0.5, 1.5, -2.5 round to 0, 2, -2.
			h := x[int8Group : 2*int8Group]
			for i := range h {
				h[i] = float32(i%7) - 2.5
			}
			h[5] = 127
		}
		if G > 2 {
			for i := 2 * int8Group; i < 3*int8Group; i++ {
				x[i] *= 1e-30 // tiny
			}
		}
		if G > 3 {
			for i := 3 * int8Group; i < 4*int8Group; i++ {
				x[i] *= 1e30 // huge
			}
		}
		want, got := make([]byte, int8RowBytes(G)), make([]byte, int8RowBytes(G))
		quantizeGroupFast = nil
		quantizeInt8Row(x, G, want)
		quantizeGroupFast = fast
		quantizeInt8Row(x, G, got)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("G=%d: byte %d (block %d, offset %d) = %#x, the Go loop's %#x", G, i, i/int8Block, i%int8Block, got[i], want[i])
			}
		}
	}
}

// BenchmarkQuantizeInt8Row: one activation row of 2048 (a decode step's projection
// input) into the int8 layout, each vector quantizer (named by its int8 kernel) and the
// Go loop.
func BenchmarkQuantizeInt8Row(b *testing.B) {
	const G = 32
	x := randF32(rand.New(rand.NewSource(1)), G*int8Group, 1)
	dst := make([]byte, int8RowBytes(G))
	saved := quantizeGroupFast
	defer func() { quantizeGroupFast = saved }()
	type quantizer struct {
		name string
		q    func(xs []float32, block []byte, j int)
	}
	var cases []quantizer
	for _, name := range int8QuantizerNames() {
		cases = append(cases, quantizer{name, int8Quantizers[name]})
	}
	for _, c := range append(cases, quantizer{"go", nil}) {
		b.Run(c.name, func(b *testing.B) {
			quantizeGroupFast = c.q
			b.SetBytes(4 * G * int8Group)
			for b.Loop() {
				quantizeInt8Row(x, G, dst)
			}
		})
	}
}
