package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// Every quantized kernel set (portable Go, and AVX2/AVX-512 where the CPU has them) and the
// reference paths give x·Wᵀ of the Tensor.Row decode to 1e-5, for odd shapes, several
// activation rows (the four- and eight-row blocks and their padding), q4 and q8, and group
// sizes the assembly takes (32, 64, 128: several steps per group) or leaves to Go (8, 24).
func TestQMatmulKernelsMatchTensorRow(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{8, 24, 32, 64, 128} {
			K := 11 * group // eleven groups: the kernels' eight-group steps and a tail
			w := quantize(randTensor(rng, 0.1, 37, K), bits, group)
			ref := rowsOf(w)
			for _, P := range []int{1, 2, 3, 4, 5, 7, 9, 17} {
				x := randTensor(rng, 1, P, K)
				want := naiveMatmul(x.F32(), ref, K)
				forEachKernels(t, func(env *Env, name string) {
					got := NewTensor(graph.F32, P, 37)
					g, err := opGraph("qmatmul", nil, x, w)
					if err != nil {
						t.Fatal(err)
					}
					info, _ := Default.Info("qmatmul")
					if err := info.Ref(env, g.Values[2], []*Tensor{x, w}, []*Tensor{got}); err != nil {
						t.Fatal(err)
					}
					near(t, fmt.Sprintf("q%d group %d P=%d %s", bits, group, P, name), got.F32(), want, 1e-5)
				})
			}
		}
	}
}

// Rows longer than the eight-row kernel's chunk (25 groups of 64: a 1024 and a 576
// chunk) with 8 to 13 activation rows: the partial dots of every chunk are summed.
func TestQMatmulLongRows(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	const M, K = 5, 25 * 64
	for _, bits := range []int{4, 8} {
		w := quantize(randTensor(rng, 0.1, M, K), bits, 64)
		ref := rowsOf(w)
		for _, P := range []int{8, 9, 13} {
			x := randTensor(rng, 1, P, K)
			want := naiveMatmul(x.F32(), ref, K)
			forEachKernels(t, func(env *Env, name string) {
				g, err := opGraph("qmatmul", nil, x, w)
				if err != nil {
					t.Fatal(err)
				}
				info, _ := Default.Info("qmatmul")
				got := NewTensor(graph.F32, P, M)
				if err := info.Ref(env, g.Values[2], []*Tensor{x, w}, []*Tensor{got}); err != nil {
					t.Fatal(err)
				}
				near(t, fmt.Sprintf("q%d K=%d P=%d %s", bits, K, P, name), got.F32(), want, 1e-5)
			})
		}
	}
}

// expert_qmatmul over a strided stack (the upper half of a fused [E, 2I, K] gate_up
// through Stride0), with per-token and per-(token, expert) activations, matches the
// Tensor.Row decode for every kernel set.
func TestExpertQMatmulKernelsStrided(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	const E, I, K, k = 5, 11, 192, 3
	for _, bits := range []int{4, 8} {
		full := quantize(randTensor(rng, 0.1, E, 2*I, K), bits, 64)
		rowBytes, rowGroups := K*bits/8, K/64
		half := &Tensor{DType: full.DType, Shape: []int{E, I, K}, Group: 64,
			Stride0: 2 * I * rowBytes, Stride0Groups: 2 * I * rowGroups,
			Data: full.Data[I*rowBytes:], Scales: full.Scales[I*rowGroups*2:], Biases: full.Biases[I*rowGroups*2:]}
		ref := rowsOf(half)
		for _, T := range []int{1, 2, 6} {
			ids := NewTensor(graph.I32, T, k)
			for i := range ids.I32() {
				ids.I32()[i] = int32(rng.Intn(E))
			}
			for _, perPair := range []bool{false, true} {
				var x *Tensor
				if perPair {
					x = randTensor(rng, 1, T, k, K)
				} else {
					x = randTensor(rng, 1, T, K)
				}
				want := make([]float32, T*k*I)
				for r, id := range ids.I32() {
					src := r / k
					if perPair {
						src = r
					}
					y := naiveMatmul(x.F32()[src*K:(src+1)*K], ref[int(id)*I*K:(int(id)+1)*I*K], K)
					copy(want[r*I:(r+1)*I], y)
				}
				forEachKernels(t, func(env *Env, name string) {
					g, err := opGraph("expert_qmatmul", nil, x, half, ids)
					if err != nil {
						t.Fatal(err)
					}
					info, _ := Default.Info("expert_qmatmul")
					got := NewTensor(graph.F32, T, k, I)
					if err := info.Ref(env, g.Values[3], []*Tensor{x, half, ids}, []*Tensor{got}); err != nil {
						t.Fatal(err)
					}
					near(t, fmt.Sprintf("q%d T=%d perPair=%v %s", bits, T, perPair, name), got.F32(), want, 1e-5)
				})
			}
		}
	}
}

// The kernels alone against dotQuant of rows.go, on rows long enough to exercise every
// group, and a dot4 whose last row is at the very end of its slice.
func TestQuantKernelsDirect(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	for _, bits := range []int{4, 8} {
		const M, K = 3, 2048
		w, err := newWeightRows(quantize(randTensor(rng, 0.05, M, K), bits, 64))
		if err != nil {
			t.Fatal(err)
		}
		x := randF32(rng, 4*K, 1)
		for _, ks := range quantKernelSets {
			acts := actsWith(ks, w, x, 4)
			one := actsWith(ks, w, x, 1)
			for r := 0; r < M; r++ {
				data, scales, biases := w.locate(r)
				var out [4]float32
				ks.dot4[bitsIndex(w.t.DType)](data, scales, biases, 64, acts.x, K, acts.xsum, &out)
				got1 := ks.dot1[bitsIndex(w.t.DType)](data, scales, biases, 64, one.x, one.xsum)
				for p := 0; p < 4; p++ {
					xp := x[p*K : (p+1)*K]
					want := w.dotQuant(r, xp, groupSums(xp, 64, nil))
					near(t, fmt.Sprintf("%s q%d dot4 row %d p %d", ks.name, bits, r, p), out[p:p+1], []float32{want}, 1e-5)
					if p == 0 {
						near(t, fmt.Sprintf("%s q%d dot1 row %d", ks.name, bits, r), []float32{got1}, []float32{want}, 1e-5)
					}
				}
			}
		}
	}
}

// actsWith prepares x's P activation rows for w as the kernel set ks takes them.
func actsWith(ks *quantKernels, w weightRows, x []float32, P int) *quantActs {
	saved := fastKernels
	fastKernels = ks
	defer func() { fastKernels = saved }()
	return prepareActs(nil, w, x, P)
}

// forEachKernels runs check with the reference kernels and with every fast kernel set.
func forEachKernels(t *testing.T, check func(env *Env, name string)) {
	t.Helper()
	check(&Env{Workers: 3, Kernels: KernelsReference}, "reference")
	saved := fastKernels
	defer func() { fastKernels = saved }()
	for _, ks := range quantKernelSets {
		fastKernels = ks
		check(&Env{Workers: 3, Kernels: KernelsFast}, ks.name)
		check(&Env{Workers: 1}, ks.name+" (default, 1 worker)")
	}
}

// TestInterleaveFastMatchesLoop: the vector interleave (where the machine has one)
// writes what the scalar loop writes, and declines run lengths it does not take.
func TestInterleaveFastMatchesLoop(t *testing.T) {
	if interleaveFast == nil {
		t.Skip("no vector interleave on this machine")
	}
	src := make([]float32, 32*70)
	for i := range src {
		src[i] = float32(i)
	}
	got, want := make([]float32, len(src)), make([]float32, len(src))
	if !interleaveFast(src, got, 32) {
		t.Fatal("the vector interleave declined runs of 32")
	}
	saved := interleaveFast
	interleaveFast = nil
	interleaveEvenOdd(src, want, 32)
	interleaveFast = saved
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
	if interleaveFast(src, got, 16) {
		t.Error("the vector interleave took runs of 16")
	}
}

// q4Dot1x4 gives each of its four rows dot1's bits: rows of 1, 2 and 32 groups of 64 and
// 128 (two units a group), runs at the start, inside and at the very end of a weight.
func TestQ4Dot1x4MatchesDot1(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	sets := 0
	for _, ks := range quantKernelSets {
		if ks.q4Dot1x4 == nil {
			continue
		}
		sets++
		for _, shape := range []struct{ M, K, group int }{{8, 64, 64}, {9, 128, 64}, {12, 2048, 64}, {8, 256, 128}} {
			w, err := newWeightRows(quantize(randTensor(rng, 0.05, shape.M, shape.K), 4, shape.group))
			if err != nil {
				t.Fatal(err)
			}
			one := actsWith(ks, w, randF32(rng, shape.K, 1), 1)
			for _, r0 := range []int{0, 3, shape.M - 4} {
				data, scales, biases := w.locateRun(r0, 4)
				var got [4]float32
				ks.q4Dot1x4(data, scales, biases, shape.group, one.x, &got)
				for i := range 4 {
					d, s, b := w.locate(r0 + i)
					want := ks.dot1[0](d, s, b, shape.group, one.x, one.xsum)
					if math.Float32bits(got[i]) != math.Float32bits(want) {
						t.Errorf("%s M%d K%d group %d rows %d..: row %d %v, dot1 %v", ks.name, shape.M, shape.K, shape.group, r0, r0+i, got[i], want)
					}
				}
			}
		}
	}
	if sets == 0 {
		t.Skip("no kernel set of this machine has q4Dot1x4")
	}
}

// The kernels that take several weight rows a call (multi_row_kernels) give the bits of
// one row a call: decode's rows four at a time and prefill's blocks of eight activation
// rows two weight rows at a time, over ranges that start and end between runs and over a
// strided stack of experts whose slices of 11 rows cut runs (those rows go one at a time).
func TestMultiRowKernelsSameBits(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	const E, I, K = 3, 11, 192
	full := quantize(randTensor(rng, 0.1, E, 2*I, K), 4, 64)
	rowBytes, rowGroups := K/2, K/64
	half := &Tensor{DType: full.DType, Shape: []int{E, I, K}, Group: 64,
		Stride0: 2 * I * rowBytes, Stride0Groups: 2 * I * rowGroups,
		Data: full.Data[I*rowBytes:], Scales: full.Scales[I*rowGroups*2:], Biases: full.Biases[I*rowGroups*2:]}
	dense := quantize(randTensor(rng, 0.1, 37, K), 4, 64)
	defer SetMultiRowKernels(true)
	for _, wt := range []*Tensor{half, dense} {
		w, err := newWeightRows(wt)
		if err != nil {
			t.Fatal(err)
		}
		rows := wt.Shape[0]
		if len(wt.Shape) == 3 {
			rows *= wt.Shape[1]
		}
		for _, P := range []int{1, 9, 16} {
			x := randF32(rng, P*K, 1)
			for _, ks := range quantKernelSets {
				acts := actsWith(ks, w, x, P)
				for _, span := range [][2]int{{0, rows}, {1, rows - 2}, {5, 14}, {9, 12}} {
					lo, hi := span[0], span[1]
					got, want := make([]float32, P*rows), make([]float32, P*rows)
					for i, on := range []bool{true, false} {
						out := [][]float32{got, want}[i]
						SetMultiRowKernels(on)
						mulQuant(acts, w, 0, lo, hi, func(p int) []float32 { return out[p*rows : (p+1)*rows] })
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Errorf("%s %v P %d rows %d..%d: activation row %d weight row %d %v several rows a call, %v one",
								ks.name, wt.Shape, P, lo, hi, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// q4Dot8x2 gives each of its two weight rows q4Dot8's bits: whole rows and chunks of rows
// (as mulQuantBlock cuts long rows), groups of 64 and 128.
func TestQ4Dot8x2MatchesDot8(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	sets := 0
	for _, ks := range quantKernelSets {
		if ks.q4Dot8x2 == nil {
			continue
		}
		sets++
		for _, shape := range []struct{ M, K, group, k0, k1 int }{{3, 64, 64, 0, 64}, {4, 2048, 64, 0, 2048}, {4, 2048, 64, 512, 1024}, {3, 512, 128, 128, 512}} {
			w, err := newWeightRows(quantize(randTensor(rng, 0.05, shape.M, shape.K), 4, shape.group))
			if err != nil {
				t.Fatal(err)
			}
			acts := actsWith(ks, w, randF32(rng, 8*shape.K, 1), 8)
			K, G := shape.K, shape.K/shape.group
			g0, g1 := shape.k0/shape.group, shape.k1/shape.group
			x := acts.x[shape.k0 : 7*K+shape.k1]
			for r := 0; r+2 <= shape.M; r++ {
				data, scales, biases := w.locateRun(r, 2)
				var got [16]float32
				ks.q4Dot8x2(data[shape.k0/2:K/2+shape.k1/2], K/2, scales[g0:G+g1], biases[g0:G+g1], G, shape.group, x, K, &got)
				for i := range 2 {
					d, s, b := w.locate(r + i)
					var want [8]float32
					ks.q4Dot8(d[shape.k0/2:shape.k1/2], s[g0:g1], b[g0:g1], shape.group, x, K, &want)
					for p := range 8 {
						if math.Float32bits(got[8*i+p]) != math.Float32bits(want[p]) {
							t.Errorf("%s M%d K%d group %d k %d..%d: weight row %d activation row %d %v, q4Dot8 %v", ks.name, shape.M, K, shape.group, shape.k0, shape.k1, r+i, p, got[8*i+p], want[p])
						}
					}
				}
			}
		}
	}
	if sets == 0 {
		t.Skip("no kernel set of this machine has q4Dot8x2")
	}
}
