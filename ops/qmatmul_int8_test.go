package ops

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"pistil/graph"
)

// int8Env is an Env that asks for int8 activations (used wherever the machine has an int8
// kernel; elsewhere the float32 kernels run and these tests check those).
func int8Env(workers int) *Env {
	return &Env{Workers: workers, Kernels: KernelsFast, Activations: ActivationsInt8}
}

// int8Bound is the most the int8 path may differ from the exact x·wᵀ of row p against
// weight row m: every activation moves by at most half its group's step (max|x|/254),
// times the weights it meets, plus float32 rounding.
func int8Bound(x, w []float32, K, p, m int, want float32) float64 {
	var bound float64
	for g := 0; g < K/int8Group; g++ {
		xs := x[p*K+g*int8Group : p*K+(g+1)*int8Group]
		ws := w[m*K+g*int8Group : m*K+(g+1)*int8Group]
		var amax, wabs float64
		for j := range xs {
			amax = math.Max(amax, math.Abs(float64(xs[j])))
			wabs += math.Abs(float64(ws[j]))
		}
		bound += amax / 254 * wabs
	}
	return bound + 1e-5*math.Max(1, math.Abs(float64(want)))
}

func checkInt8Result(t *testing.T, what string, got, want, x, w []float32, K, M int) {
	t.Helper()
	for i := range got {
		p, m := i/M, i%M
		if d := math.Abs(float64(got[i] - want[i])); !(d <= int8Bound(x, w, K, p, m, want[i])) {
			t.Fatalf("%s[%d,%d] = %v, want %v (|diff| %.3g > bound %.3g)", what, p, m, got[i], want[i], d, int8Bound(x, w, K, p, m, want[i]))
		}
	}
}

// The int8 qmatmul stays within the quantization bound of the exact product for odd
// shapes: group counts with a partial last block (1, 5, 17 groups), several kernel chunks
// (40 groups), activation row counts that are not multiples of eight, one and three
// workers.
func TestInt8QMatmulWithinQuantizationBound(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	for _, G := range []int{1, 5, 8, 17, 40} {
		K := G * int8Group
		const M = 37
		w := quantize(randTensor(rng, 0.1, M, K), 4, int8Group)
		ref := rowsOf(w)
		for _, P := range []int{2, 3, 7, 8, 9, 17} {
			x := randTensor(rng, 1, P, K)
			want := naiveMatmul(x.F32(), ref, K)
			forEachInt8Kernel(t, func(kernel string) {
				for _, workers := range []int{1, 3} {
					got := NewTensor(graph.F32, P, M)
					g, err := opGraph("qmatmul", nil, x, w)
					if err != nil {
						t.Fatal(err)
					}
					info, _ := Default.Info("qmatmul")
					if err := info.Ref(int8Env(workers), g.Values[2], []*Tensor{x, w}, []*Tensor{got}); err != nil {
						t.Fatal(err)
					}
					checkInt8Result(t, fmt.Sprintf("%s G=%d P=%d workers=%d", kernel, G, P, workers), got.F32(), want, x.F32(), ref, K, M)
				}
			})
		}
	}
}

// roundedActs is x with every group of 64 rounded the way the int8 path rounds it: to
// the nearest of ±127 steps of max|x|/127, halves to even.
func roundedActs(x []float32) []float32 { return roundedActsTo(x, 127) }

// roundedActsTo is x with every group of 64 rounded to the nearest of ±steps steps of
// max|x|/steps, halves to even, in float32 as the quantizers compute it.
func roundedActsTo(x []float32, steps float32) []float32 {
	out := make([]float32, len(x))
	for g := 0; g+int8Group <= len(x); g += int8Group {
		var amax float32
		for _, v := range x[g : g+int8Group] {
			amax = max(amax, abs32(v))
		}
		if amax == 0 {
			continue
		}
		for i := g; i < g+int8Group; i++ {
			out[i] = float32(math.RoundToEven(float64(x[i]*(steps/amax)))) * (amax / steps)
		}
	}
	return out
}

// The int8 qmatmul is exactly the product of the rounded activations with the weights,
// to float32 summation: both terms of w = s·q + b meet the same rounded x. Taking the
// bias term's Σx from the unrounded x instead leaves an error of Σ s·q·(x̂ - x), whose
// codes q (0..15, never centred) make it two to three times the rounding's own
// Σ w·(x̂ - x) on centred weights; this test catches that. Weights are centred (MLX
// biases near -7.5 steps), activations have an outlier per group as real ones do.
func TestInt8QMatmulIsProductOfRoundedActivations(t *testing.T) {
	rng := rand.New(rand.NewSource(26))
	for _, G := range []int{3, 8, 40} {
		K := G * int8Group
		const M, P = 29, 11
		w := quantize(randTensor(rng, 0.1, M, K), 4, int8Group)
		ref := rowsOf(w)
		x := randTensor(rng, 1, P, K)
		for i := 0; i < P*G; i++ {
			x.F32()[i*int8Group+rng.Intn(int8Group)] *= 8
		}
		want := naiveMatmul(roundedActs(x.F32()), ref, K)
		g, err := opGraph("qmatmul", nil, x, w)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := Default.Info("qmatmul")
		forEachInt8Kernel(t, func(name string) {
			got := NewTensor(graph.F32, P, M)
			if err := info.Ref(int8Env(2), g.Values[2], []*Tensor{x, w}, []*Tensor{got}); err != nil {
				t.Fatal(err)
			}
			for i, v := range got.F32() {
				p, m := i/M, i%M
				var mag float64 // the float32 rounding of a sum of K products scales with it
				for k := 0; k < K; k++ {
					mag += math.Abs(float64(x.F32()[p*K+k]) * float64(ref[m*K+k]))
				}
				if d := math.Abs(float64(v - want[i])); d > 1e-6*mag {
					t.Fatalf("%s G=%d [%d,%d] = %v, want %v: |diff| %.3g > %.3g", name, G, p, m, v, want[i], d, 1e-6*mag)
				}
			}
		})
	}
}

// forEachInt8Kernel runs f with each int8 kernel of this machine in use.
func forEachInt8Kernel(t *testing.T, f func(name string)) {
	t.Helper()
	saved := int8KernelName
	if saved == "" {
		t.Skip("this machine has no int8 kernel: the float32 kernels run")
	}
	defer SetInt8Kernel(saved)
	for _, name := range int8KernelNames() {
		if err := SetInt8Kernel(name); err != nil {
			t.Fatal(err)
		}
		f(name)
	}
}

// expert_qmatmul with int8 activations: each routed row within the bound of its expert's
// exact product (experts with one token take the float32 kernels, the rest int8).
func TestInt8ExpertQMatmulWithinQuantizationBound(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	const E, M, K, T, k = 6, 19, 5 * 64, 23, 3
	w := quantize(randTensor(rng, 0.1, E, M, K), 4, int8Group)
	ref := rowsOf(w)
	x := randTensor(rng, 1, T, K)
	ids := NewTensor(graph.I32, T, k)
	for tok := 0; tok < T; tok++ {
		for j, e := range rng.Perm(E)[:k] {
			ids.I32()[tok*k+j] = int32(e)
		}
	}
	g, err := opGraph("expert_qmatmul", nil, x, w, ids)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := Default.Info("expert_qmatmul")
	forEachInt8Kernel(t, func(kernel string) {
		got := NewTensor(graph.F32, T, k, M)
		if err := info.Ref(int8Env(2), g.Values[3], []*Tensor{x, w, ids}, []*Tensor{got}); err != nil {
			t.Fatal(err)
		}
		for tok := 0; tok < T; tok++ {
			for j := 0; j < k; j++ {
				e := int(ids.I32()[tok*k+j])
				want := naiveMatmul(x.F32()[tok*K:(tok+1)*K], ref[e*M*K:(e+1)*M*K], K)
				checkInt8Result(t, fmt.Sprintf("%s token %d expert %d", kernel, tok, e), got.F32()[(tok*k+j)*M:(tok*k+j+1)*M], want,
					x.F32()[tok*K:(tok+1)*K], ref[e*M*K:(e+1)*M*K], K, M)
			}
		}
	})
}

// Every int8 kernel gives the portable kernel's result on the same layout (1..5 blocks,
// rows further apart than their blocks), to float32 summation order.
func TestInt8KernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for blocks := 1; blocks <= 5; blocks++ {
		G := blocks * int8Groups
		K := G * int8Group
		w := quantize(randTensor(rng, 0.1, 1, K), 4, int8Group)
		rowStride := int8RowBytes(G) + int8Block // an unused block between rows
		acts := make([]byte, int8RowsPerDot*rowStride)
		x := randF32(rng, int8RowsPerDot*K, 1)
		for p := 0; p < int8RowsPerDot; p++ {
			quantizeInt8Row(x[p*K:(p+1)*K], G, acts[p*rowStride:p*rowStride+int8RowBytes(G)])
		}
		var want [8]float32
		q4Int8Dot8Go(w.Data, u16(w.Scales), u16(w.Biases), blocks, acts, rowStride, &want)
		for _, name := range int8KernelNames() {
			got := [8]float32{1, 2, 3, 4, 5, 6, 7, 8} // the kernels add to out
			int8KernelSets[name](w.Data, u16(w.Scales), u16(w.Biases), blocks, acts, rowStride, &got)
			for p := range got {
				if d := math.Abs(float64(got[p] - (want[p] + float32(p+1)))); d > 1e-4*math.Max(1, math.Abs(float64(want[p]))) {
					t.Fatalf("%s blocks=%d row %d: %v, want %v", name, blocks, p, got[p]-float32(p+1), want[p])
				}
			}
		}
	}
}

// int8TileInputs are a tile kernel's inputs: rows q4 weight rows, each one block longer
// than the blocks read (codeStride bytes and rowGroups groups apart), and the eight
// activation rows quantized rowStride bytes apart (an unused block between rows).
type int8TileInputs struct {
	w                                *Tensor
	codeStride, rowGroups, rowStride int
	acts                             []byte
}

func newInt8TileInputs(rng *rand.Rand, blocks, rows int) int8TileInputs {
	G := blocks * int8Groups
	in := int8TileInputs{rowGroups: G + int8Groups, rowStride: int8RowBytes(G) + int8Block}
	in.w = quantize(randTensor(rng, 0.1, rows, in.rowGroups*int8Group), 4, int8Group)
	in.codeStride = in.rowGroups * int8Group / 2
	in.acts = make([]byte, int8RowsPerDot*in.rowStride)
	x := randF32(rng, int8RowsPerDot*G*int8Group, 1)
	for p := 0; p < int8RowsPerDot; p++ {
		quantizeInt8Row(x[p*G*int8Group:(p+1)*G*int8Group], G, in.acts[p*in.rowStride:p*in.rowStride+int8RowBytes(G)])
	}
	return in
}

// Every tile kernel equals its kernel row by row, to the bit, and the portable kernel
// within float32 rounding: odd and even row counts, a chunk of longer rows (strides past
// the blocks read), one to five blocks, sums added to what out holds.
func TestInt8TileKernelsMatchRowByRow(t *testing.T) {
	rng := rand.New(rand.NewSource(26))
	for blocks := 1; blocks <= 5; blocks++ {
		for _, rows := range []int{1, 2, 3, 6, 7} {
			in := newInt8TileInputs(rng, blocks, rows)
			w, codeStride, rowGroups, rowStride, acts := in.w, in.codeStride, in.rowGroups, in.rowStride, in.acts
			scales, biases := u16(w.Scales), u16(w.Biases)
			start := func(r int) float32 { return float32(r%5) - 2 } // the kernels add to out
			for _, name := range int8KernelNames() {
				got := make([][8]float32, rows)
				for r := range got {
					for p := range got[r] {
						got[r][p] = start(r + p)
					}
				}
				int8TileKernelSets[name](w.Data, codeStride, scales, biases, rowGroups, blocks, acts, rowStride, got)
				for r := range got {
					want := [8]float32{}
					for p := range want {
						want[p] = start(r + p)
					}
					int8KernelSets[name](w.Data[r*codeStride:], scales[r*rowGroups:], biases[r*rowGroups:], blocks, acts, rowStride, &want)
					var oracle [8]float32
					q4Int8Dot8Go(w.Data[r*codeStride:], scales[r*rowGroups:], biases[r*rowGroups:], blocks, acts, rowStride, &oracle)
					for p := range want {
						if got[r][p] != want[p] {
							t.Fatalf("%s blocks=%d rows=%d: row %d act %d = %v, its kernel %v", name, blocks, rows, r, p, got[r][p], want[p])
						}
						o := oracle[p] + start(r+p)
						if d := math.Abs(float64(got[r][p] - o)); d > 1e-4*math.Max(1, math.Abs(float64(o))) {
							t.Fatalf("%s blocks=%d rows=%d: row %d act %d = %v, the Go kernel %v", name, blocks, rows, r, p, got[r][p], o)
						}
					}
				}
			}
		}
	}
}

// The integer part is exact: with unit scales, zero biases and integer activations whose
// every group reaches ±127 (so the activation scale is exactly 1), each kernel returns the
// exact integer Σ q·x, codes 0..15 against activations -127..127 at the extremes too.
func TestInt8KernelIntegerPartExact(t *testing.T) {
	rng := rand.New(rand.NewSource(24))
	const blocks = 3
	G := blocks * int8Groups
	K := G * int8Group
	codes := make([]byte, K/2)
	for i := range codes {
		codes[i] = byte(rng.Intn(256))
	}
	codes[0], codes[1] = 0xff, 0x00 // 15s and 0s
	one := F32ToBF16(1)
	scales, biases := make([]uint16, G), make([]uint16, G)
	for g := range scales {
		scales[g] = one
	}
	rowBytes := int8RowBytes(G)
	acts := make([]byte, int8RowsPerDot*rowBytes)
	var want [8]int64
	for p := 0; p < int8RowsPerDot; p++ {
		x := make([]float32, K)
		for i := range x {
			x[i] = float32(rng.Intn(255) - 127)
		}
		for g := 0; g < G; g++ {
			x[g*int8Group+rng.Intn(int8Group)] = float32(127 * (1 - 2*rng.Intn(2)))
		}
		if p == 0 {
			for i := 0; i < 4; i++ {
				x[i] = -127 // against codes 15 and 0
			}
		}
		quantizeInt8Row(x, G, acts[p*rowBytes:(p+1)*rowBytes])
		for i, v := range x {
			q := int64(codes[i/2] >> (4 * (i % 2)) & 15)
			want[p] += q * int64(v)
		}
	}
	for _, name := range int8KernelNames() {
		var got [8]float32
		int8KernelSets[name](codes, scales, biases, blocks, acts, rowBytes, &got)
		for p := range got {
			if int64(got[p]) != want[p] || float32(int64(got[p])) != got[p] {
				t.Fatalf("%s row %d: %v, want exactly %d", name, p, got[p], want[p])
			}
		}
	}
	// The tile kernels over three weight rows: the codes above, all 15s (the largest
	// unsigned operand against ±127), and the codes reversed.
	rows := 3
	tileCodes := make([]byte, rows*len(codes))
	copy(tileCodes, codes)
	for i := range codes {
		tileCodes[len(codes)+i] = 0xff
		tileCodes[2*len(codes)+i] = codes[len(codes)-1-i]
	}
	tileScales, tileBiases := make([]uint16, rows*G), make([]uint16, rows*G)
	for i := range tileScales {
		tileScales[i] = one
	}
	wants := make([][8]int64, rows)
	for p := 0; p < int8RowsPerDot; p++ {
		for r := 0; r < rows; r++ {
			rc := tileCodes[r*len(codes) : (r+1)*len(codes)]
			for i := 0; i < K; i++ {
				blk, j := acts[p*rowBytes+i/(int8Group*int8Groups)*int8Block:], int8Lane(i/int8Group%int8Groups)
				e := i % int8Group
				xq := int64(int8(blk[(2*(e/16)+e%2)*64+8*j+e%16/2]))
				wants[r][p] += int64(rc[i/2]>>(4*(i%2))&15) * xq
			}
		}
	}
	for _, name := range int8KernelNames() {
		got := make([][8]float32, rows)
		int8TileKernelSets[name](tileCodes, len(codes), tileScales, tileBiases, G, blocks, acts, rowBytes, got)
		for r := range got {
			for p := range got[r] {
				if int64(got[r][p]) != wants[r][p] || float32(int64(got[r][p])) != got[r][p] {
					t.Fatalf("%s tile row %d act %d: %v, want exactly %d", name, r, p, got[r][p], wants[r][p])
				}
			}
		}
	}
}

// Each element comes back from the layout within half a step of its value, and the
// group's sum is that of the rounded elements.
func TestQuantizeInt8RowRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(25))
	const G = 11
	x := randF32(rng, G*int8Group, 3)
	clear(x[2*int8Group : 3*int8Group]) // an all-zero group
	buf := make([]byte, int8RowBytes(G))
	quantizeInt8Row(x, G, buf)
	for g := 0; g < G; g++ {
		blk, j := buf[g/int8Groups*int8Block:], int8Lane(g%int8Groups)
		sx, sum := f32s(blk[512:576])[2*j], 2*f32s(blk[576:640])[2*j]
		var want float32
		for e := 0; e < int8Group; e++ {
			v := x[g*int8Group+e]
			k, rest := e/16, e%16
			q := float32(int8(blk[(2*k+rest%2)*64+8*j+rest/2]))
			want += q * sx
			if d := math.Abs(float64(q*sx - v)); d > float64(sx)/2*1.0001 {
				t.Fatalf("group %d element %d: %v back as %v (step %v)", g, e, v, q*sx, sx)
			}
		}
		if math.Abs(float64(sum-want)) > 1e-4 {
			t.Fatalf("group %d: sum %v, want %v", g, sum, want)
		}
	}
}

func int8KernelNames() []string {
	var names []string
	for name := range int8KernelSets {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// BenchmarkInt8Kernel is one core's block kernels alone, L2-resident: 256 q4 rows of
// K = 2048 (the 35B-A3B's hidden size) against eight activation rows, the float32 kernels
// (the AVX-512 eight-row one, dequantizing in registers; the AVX2 four-row one, twice)
// beside the int8 ones. GFLOP/s is 2 flops per multiply-add.
//
//	go test ./ops/ -run X -bench Int8Kernel
func BenchmarkInt8Kernel(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const M, K = 256, 2048
	G := K / int8Group
	wt := randQuantized(rng, 4, int8Group, M, K)
	w, err := newWeightRows(wt)
	if err != nil {
		b.Fatal(err)
	}
	x := randF32(rng, 8*K, 1)
	flops := float64(2 * M * 8 * K)
	if f32 := avx512KernelsIfAny(); f32 != nil {
		acts := actsWith(f32, w, x, 8)
		b.Run("f32/"+f32.name, func(b *testing.B) {
			var out [8]float32
			for b.Loop() {
				for r := 0; r < M; r++ {
					data, scales, biases := w.locate(r)
					f32.q4Dot8(data, scales, biases, int8Group, acts.x, K, &out)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	// A machine without AVX-512 has the four-row float32 kernels: the one int8 AVX2 replaces
	// there, here twice per eight rows.
	for _, ks := range quantKernelSets {
		if ks.q4Dot8 != nil || ks.unit == goQuantKernels.unit {
			continue
		}
		acts := actsWith(ks, w, x, 8)
		b.Run("f32/"+ks.name, func(b *testing.B) {
			var out [4]float32
			for b.Loop() {
				for r := 0; r < M; r++ {
					data, scales, biases := w.locate(r)
					ks.dot4[0](data, scales, biases, int8Group, acts.x, K, acts.xsum[:4*G], &out)
					ks.dot4[0](data, scales, biases, int8Group, acts.x[4*K:], K, acts.xsum[4*G:], &out)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	acts := make([]byte, 8*int8RowBytes(G))
	for p := 0; p < 8; p++ {
		quantizeInt8Row(x[p*K:(p+1)*K], G, acts[p*int8RowBytes(G):])
	}
	for _, name := range int8KernelNames() {
		kernel := int8KernelSets[name]
		b.Run("int8/"+name, func(b *testing.B) {
			var out [8]float32
			for b.Loop() {
				for r := 0; r < M; r++ {
					data, scales, biases := w.locate(r)
					kernel(data, scales, biases, G/int8Groups, acts, int8RowBytes(G), &out)
				}
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkInt8TileKernel is one core's int8 kernels over a tile of weight rows,
// L2-resident, at the two row lengths of the 35B-A3B's q4 matmuls: K = 2048 (256 rows:
// projections, experts' gate/up) and K = 512 (1024 rows: the experts' down projection,
// one block a row), each kernel called once per row ("rows") beside its tile kernel
// called once for all of them ("tile").
//
//	go test ./ops/ -run X -bench Int8TileKernel
func BenchmarkInt8TileKernel(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	for _, shape := range []struct{ M, K int }{{256, 2048}, {1024, 512}} {
		M, K := shape.M, shape.K
		G := K / int8Group
		w, err := newWeightRows(randQuantized(rng, 4, int8Group, M, K))
		if err != nil {
			b.Fatal(err)
		}
		x := randF32(rng, 8*K, 1)
		acts := make([]byte, 8*int8RowBytes(G))
		for p := 0; p < 8; p++ {
			quantizeInt8Row(x[p*K:(p+1)*K], G, acts[p*int8RowBytes(G):])
		}
		flops := float64(2 * M * 8 * K)
		codes, scales, biases := w.locateRun(0, M)
		out := make([][8]float32, M)
		for _, name := range int8KernelNames() {
			kernel, tile := int8KernelSets[name], int8TileKernelSets[name]
			b.Run(fmt.Sprintf("K=%d/rows/%s", K, name), func(b *testing.B) {
				for b.Loop() {
					for r := 0; r < M; r++ {
						kernel(codes[r*K/2:], scales[r*G:], biases[r*G:], G/int8Groups, acts, int8RowBytes(G), &out[r])
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
			b.Run(fmt.Sprintf("K=%d/tile/%s", K, name), func(b *testing.B) {
				for b.Loop() {
					tile(codes, K/2, scales, biases, G, G/int8Groups, acts, int8RowBytes(G), out)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// avx512KernelsIfAny is the float32 kernel set with an eight-row q4 kernel, nil where the
// machine has none.
func avx512KernelsIfAny() *quantKernels {
	for _, ks := range quantKernelSets {
		if ks.q4Dot8 != nil {
			return ks
		}
	}
	return nil
}

// An Env's choice decides, float32 when it names none, the reference kernels never take
// int8, and a bad name is an error naming it.
func TestActivationsChoice(t *testing.T) {
	if err := CheckActivations("int4"); err == nil || !strings.Contains(err.Error(), `"int4"`) {
		t.Fatalf("CheckActivations(int4) = %v, want an error naming it", err)
	}
	cases := []struct {
		env  *Env
		want bool
	}{
		{nil, false},
		{&Env{}, false},
		{&Env{Activations: ActivationsF32}, false},
		{&Env{Activations: ActivationsInt8}, true},
		{&Env{Activations: ActivationsInt8, Kernels: KernelsReference}, false},
		{&Env{Activations: ActivationsInt8All}, true},
		{&Env{Activations: ActivationsInt8All, Kernels: KernelsReference}, false},
	}
	for i, c := range cases {
		if got := c.env.int8Activations(); got != c.want {
			t.Errorf("case %d: int8Activations = %v, want %v", i, got, c.want)
		}
	}
	// Decode (one row) takes int8 only under "int8-all".
	for _, c := range []struct {
		env  *Env
		want bool
	}{
		{&Env{Activations: ActivationsInt8}, false},
		{&Env{Activations: ActivationsInt8All}, true},
		{&Env{Activations: ActivationsInt8All, Kernels: KernelsReference}, false},
	} {
		if got := c.env.int8Decode(); got != c.want {
			t.Errorf("%+v: int8Decode = %v, want %v", *c.env, got, c.want)
		}
	}
	// "int16" is int16 in decode alone, never int8, never with the reference kernels.
	for _, c := range []struct {
		env        *Env
		int16, any bool
	}{
		{nil, false, false},
		{&Env{Activations: ActivationsInt16}, true, false},
		{&Env{Activations: ActivationsInt16, Kernels: KernelsReference}, false, false},
		{&Env{Activations: ActivationsInt8All}, false, true},
	} {
		if got := c.env.int16Decode(); got != c.int16 {
			t.Errorf("%+v: int16Decode = %v, want %v", c.env, got, c.int16)
		}
		if got := c.env.int8Activations(); got != c.any {
			t.Errorf("%+v: int8Activations = %v, want %v", c.env, got, c.any)
		}
	}
	if err := CheckActivations(ActivationsInt16); err != nil {
		t.Errorf("CheckActivations(int16) = %v", err)
	}
}

// TestStoreAccStagedSameAsDirect holds the staged stores (int8StagedStores) to the element
// by element ones: every sum in its place, nothing else written, for tiles that are and
// are not whole staging chunks and for every count of valid activation rows.
func TestStoreAccStagedSameAsDirect(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const P, M = 19, 300
	for _, n := range []int{1, 17, 63, 64, 65, 128, 227} {
		for valid := 1; valid <= 8; valid++ {
			acc := make([][8]float32, n)
			for r := range acc {
				for i := range acc[r] {
					acc[r][i] = rng.Float32()
				}
			}
			outs := [2][]float32{}
			for k, staged := range []bool{false, true} {
				out := make([]float32, P*M)
				for i := range out {
					out[i] = -1
				}
				storeAcc(acc, 9, valid, 5, func(p int) []float32 { return out[p*M : (p+1)*M] }, staged)
				outs[k] = out
			}
			for i := range outs[0] {
				if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
					t.Fatalf("n=%d valid=%d: element %d (row %d, col %d) staged %v, direct %v", n, valid, i, i/M, i%M, outs[1][i], outs[0][i])
				}
			}
		}
	}
}
