package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// Tests of the int16-activation decode path (activations = "int16", qmatmul_int16.go).

// int16RowKernels is every int16 row kernel of this machine by name: the portable oracle
// and the assembly ones it has.
func int16RowKernels() map[string]int16Dot1 {
	kernels := map[string]int16Dot1{"go": q4Int16Dot1Go}
	for name, k := range int16RowKernelSets {
		kernels[name] = k
	}
	return kernels
}

// roundedActs16 is x with every group of 64 rounded as the int16 path rounds it: to the
// nearest of ±32,767 steps of max|x|/32,767, halves to even.
func roundedActs16(x []float32) []float32 { return roundedActsTo(x, int16Step) }

// The layout holds each group's rounded activations where the kernel reads them (the even
// elements, then the odd ones), its scale max|x|/32,767 and the bias term's sx·Σxq, each
// element within half a step of x (and the step's own float32 rounding); a zero group and the tables' padding are zeros even
// over a buffer that held other bytes.
func TestQuantizeInt16Row(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	for _, G := range []int{1, 3, 16, 17, 40} {
		K := G * int16Group
		x := randF32(rng, K, 1)
		for g := 0; g < G; g++ {
			x[g*int16Group+rng.Intn(int16Group)] *= 20 // an outlier per group
		}
		if G > 2 {
			clear(x[2*int16Group : 3*int16Group]) // a zero group
		}
		dst := make([]byte, int16RowBytes(G))
		for i := range dst {
			dst[i] = 0xa5
		}
		quantizeInt16Row(x, G, dst)
		xq := i16s(dst[:G*int16GroupBytes])
		sx, xsum := int16Tables(dst, G)
		for g := 0; g < G; g++ {
			var amax float32
			for _, v := range x[g*int16Group : (g+1)*int16Group] {
				amax = max(amax, abs32(v))
			}
			if want := amax / int16Step; sx[g] != want {
				t.Fatalf("G=%d group %d: scale %v, want %v", G, g, sx[g], want)
			}
			var qsum int32
			for e := 0; e < int16Group; e++ {
				pos := e / 2
				if e%2 == 1 {
					pos += int16Group / 2
				}
				q := xq[g*int16Group+pos]
				qsum += int32(q)
				v := x[g*int16Group+e]
				// Half a step, and the rounding of the step itself (and of x·32,767/max|x|)
				// over q steps.
				if d := math.Abs(float64(q)*float64(sx[g]) - float64(v)); d > float64(sx[g])*(0.5+math.Abs(float64(q))*0x1p-22) {
					t.Fatalf("G=%d group %d element %d: %d steps of %v for %v (off by %.3g)", G, g, e, q, sx[g], v, d)
				}
			}
			if want := float32(qsum) * sx[g]; xsum[g] != want {
				t.Fatalf("G=%d group %d: bias sum %v, want %v", G, g, xsum[g], want)
			}
		}
		for g := G; g < len(sx); g++ {
			if sx[g] != 0 || xsum[g] != 0 {
				t.Fatalf("G=%d: table padding at group %d holds %v, %v", G, g, sx[g], xsum[g])
			}
		}
	}
}

// Every row kernel gives the float64 product of the weights with the rounded activations
// to float32 summation: group counts below, at and past the kernel's units of 16 and its
// pairs (odd counts), runs of rows back to back (1, 3, 64), and the integer part's extreme
// (every code 15 against activations all +32,767 or all -32,767: four products of
// 491,505 a lane).
func TestInt16RowKernelsMatchFloat64(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	for name := range int16RowKernels() {
		t.Logf("row kernel %s", name)
	}
	for _, G := range []int{1, 2, 3, 8, 15, 16, 17, 32, 33} {
		K := G * int16Group
		for _, rows := range []int{1, 3, 64} {
			for _, extreme := range []bool{false, true} {
				w := quantize(randTensor(rng, 0.1, rows, K), 4, int16Group)
				x := randF32(rng, K, 1)
				if extreme {
					for i := range w.Data {
						w.Data[i] = 0xff
					}
					for i := range x {
						x[i] = float32(1 - 2*(i/int16Group%2)) // ±1 by group: every code ±32,767
					}
				}
				acts := make([]byte, int16RowBytes(G))
				quantizeInt16Row(x, G, acts)
				ref, rounded := rowsOf(w), roundedActs16(x)
				for name, kernel := range int16RowKernels() {
					got := make([]float32, rows)
					kernel(w.Data, u16(w.Scales), u16(w.Biases), G, acts, got)
					for r := range got {
						var want, mag float64
						for i := 0; i < K; i++ {
							p := float64(ref[r*K+i]) * float64(rounded[i])
							want += p
							mag += math.Abs(p)
						}
						if d := math.Abs(float64(got[r]) - want); d > 2e-6*mag+1e-6 {
							t.Fatalf("%s G=%d rows=%d extreme=%v row %d: %v, want %v (|diff| %.3g > %.3g)",
								name, G, rows, extreme, r, got[r], want, d, 2e-6*mag+1e-6)
						}
					}
				}
			}
		}
	}
}

// int16Bound is the most the int16 path may differ from the exact x·wᵀ of weight row m:
// every activation moves by at most half its group's step (max|x|/65,534), times the
// weights it meets, plus float32 rounding.
func int16Bound(x, w []float32, K, m int, want float32) float64 {
	var bound float64
	for g := 0; g < K/int16Group; g++ {
		xs := x[g*int16Group : (g+1)*int16Group]
		ws := w[m*K+g*int16Group : m*K+(g+1)*int16Group]
		var amax, wabs float64
		for j := range xs {
			amax = math.Max(amax, math.Abs(float64(xs[j])))
			wabs += math.Abs(float64(ws[j]))
		}
		bound += amax / (2 * int16Step) * wabs
	}
	return bound + 1e-5*math.Max(1, math.Abs(float64(want)))
}

// A decode row under "int16" through the ops (qmatmul, and expert_qmatmul over a stack of
// experts): each result is the product of the rounded activations to float32 summation,
// and within the rounding's bound of the exact product; a prefill (three rows) under
// "int16" gives the float32 path's bits.
func TestInt16DecodeIsProductOfRoundedActivations(t *testing.T) {
	if int16RowKernel == nil {
		t.Skip("this machine has no int16 row kernel: \"int16\" runs the float32 kernels")
	}
	rng := rand.New(rand.NewSource(43))
	env := &Env{Workers: 2, Kernels: KernelsFast, Activations: ActivationsInt16}
	for _, G := range []int{3, 8, 11, 32} {
		K := G * int16Group
		const E, M, k = 5, 150, 3
		w, ref, x, ids, ge := decodeExpertCase(t, rng, E, M, G, []int32{4, 0, 2})
		rounded := roundedActs16(x.F32())
		infoE, _ := Default.Info("expert_qmatmul")
		got := NewTensor(graph.F32, 1, k, M)
		if err := infoE.Ref(env, ge.Values[3], []*Tensor{x, w, ids}, []*Tensor{got}); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < k; j++ {
			e := int(ids.I32()[j])
			wE := ref[e*M*K : (e+1)*M*K]
			want, exact := naiveMatmul(rounded, wE, K), naiveMatmul(x.F32(), wE, K)
			for m, v := range got.F32()[j*M : (j+1)*M] {
				var mag float64
				for i := 0; i < K; i++ {
					mag += math.Abs(float64(x.F32()[i]) * float64(wE[m*K+i]))
				}
				if d := math.Abs(float64(v - want[m])); d > 1e-6*mag {
					t.Fatalf("G=%d expert %d row %d = %v, want %v: |diff| %.3g > %.3g", G, e, m, v, want[m], d, 1e-6*mag)
				}
				if d := math.Abs(float64(v - exact[m])); d > int16Bound(x.F32(), wE, K, m, exact[m]) {
					t.Fatalf("G=%d expert %d row %d = %v, exact %v: past the rounding's bound %.3g", G, e, m, v, exact[m], int16Bound(x.F32(), wE, K, m, exact[m]))
				}
			}
		}
		// The first expert as a plain matmul: a decode row, and three prefill rows, which
		// "int16" leaves to the float32 kernels.
		wq := &Tensor{DType: w.DType, Shape: []int{M, K}, Group: w.Group,
			Data: w.Data[:M*K/2], Scales: w.Scales[:M*G*2], Biases: w.Biases[:M*G*2]}
		for _, P := range []int{1, 3} {
			xs := randTensor(rng, 1, P, K)
			g2, err := opGraph("qmatmul", nil, xs, wq)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := Default.Info("qmatmul")
			out, f32 := NewTensor(graph.F32, P, M), NewTensor(graph.F32, P, M)
			if err := info.Ref(env, g2.Values[2], []*Tensor{xs, wq}, []*Tensor{out}); err != nil {
				t.Fatal(err)
			}
			if err := info.Ref(&Env{Workers: 2, Kernels: KernelsFast}, g2.Values[2], []*Tensor{xs, wq}, []*Tensor{f32}); err != nil {
				t.Fatal(err)
			}
			if P > 1 {
				for i, v := range out.F32() {
					if v != f32.F32()[i] {
						t.Fatalf("G=%d: prefill row %d under int16 = %v, float32 path %v", G, i/M, v, f32.F32()[i])
					}
				}
				continue
			}
			want := naiveMatmul(roundedActs16(xs.F32()), ref[:M*K], K)
			for m, v := range out.F32() {
				if d := math.Abs(float64(v - want[m])); d > 1e-5*math.Max(1, math.Abs(float64(want[m]))) {
					t.Fatalf("G=%d: qmatmul row %d = %v, want %v", G, m, v, want[m])
				}
			}
		}
	}
}

// BenchmarkInt16RowKernel times the int16 row kernel beside the int8 one and the float32
// ones on the shapes of BenchmarkInt8RowKernel (one core; l2: 256 rows of 2,048 in the L2
// cache, stream: 2^17 rows swept from memory). MB/s is weight bytes per second.
//
//	go test ./ops/ -run X -bench 'Int16RowKernel'
func BenchmarkInt16RowKernel(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const K = 2048
	G := K / int16Group
	x := randF32(rng, K, 1)
	acts16 := make([]byte, int16RowBytes(G))
	quantizeInt16Row(x, G, acts16)
	acts8 := make([]byte, int8RowBytes(G))
	quantizeInt8Row(x, G, acts8)
	out := make([]float32, int16RowRun)
	forRowKernelSizes(b, rng, K, func(size string, M int, wt *Tensor, w weightRows) {
		bytes := int64(len(wt.Data) + len(wt.Scales) + len(wt.Biases))
		rowBytes := K / 2
		run := func(name string, kernel func(r int)) {
			b.Run(fmt.Sprintf("%s/%s", size, name), func(b *testing.B) {
				b.SetBytes(bytes)
				for b.Loop() {
					for r := 0; r < M; r += int16RowRun {
						kernel(r)
					}
				}
			})
		}
		for name, kernel := range int16RowKernelSets {
			run("int16-"+name, func(r int) {
				kernel(wt.Data[r*rowBytes:(r+int16RowRun)*rowBytes], u16(wt.Scales)[r*G:(r+int16RowRun)*G],
					u16(wt.Biases)[r*G:(r+int16RowRun)*G], G, acts16, out)
			})
		}
		if int8RowKernel != nil {
			run("int8", func(r int) {
				int8RowKernel(wt.Data[r*rowBytes:(r+int8RowRun)*rowBytes], u16(wt.Scales)[r*G:(r+int8RowRun)*G],
					u16(wt.Biases)[r*G:(r+int8RowRun)*G], G/int8Groups, acts8, out)
			})
		}
		ks := fastKernels
		one := actsWith(ks, w, x, 1)
		run("f32-"+ks.name, func(r int) {
			for i := r; i < r+int16RowRun; i++ {
				data, scales, biases := w.locate(i)
				ks.dot1[0](data, scales, biases, int16Group, one.x, one.xsum)
			}
		})
	})
}

// BenchmarkQMatmulStreamInt16 is BenchmarkQMatmulStream under "int16", beside "int8-all"
// and float32: a decode-shaped q4 qmatmul whose weights come from memory, on one and two
// workers.
func BenchmarkQMatmulStreamInt16(b *testing.B) {
	var envs []namedEnv
	for _, act := range []string{ActivationsF32, ActivationsInt16, ActivationsInt8All} {
		for _, workers := range []int{1, 2} {
			envs = append(envs, namedEnv{fmt.Sprintf("%s/workers=%d", act, workers), &Env{Workers: workers, Kernels: KernelsFast, Activations: act}})
		}
	}
	benchQMatmulStream(b, envs)
}

// A non-finite activation is not rounded away: a row holding a NaN or an infinity gives
// non-finite sums from every int16 kernel, as the float32 kernels do, so the router's
// non-finite check still sees it downstream.
func TestInt16RowKeepsNonFiniteActivations(t *testing.T) {
	rng := rand.New(rand.NewSource(45))
	const G, rows = 3, 4
	K := G * int16Group
	w := quantize(randTensor(rng, 0.1, rows, K), 4, int16Group)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := randF32(rng, K, 1)
		x[int16Group+5] = bad
		acts := make([]byte, int16RowBytes(G))
		quantizeInt16Row(x, G, acts)
		for name, kernel := range int16RowKernels() {
			got := make([]float32, rows)
			kernel(w.Data, u16(w.Scales), u16(w.Biases), G, acts, got)
			for r, v := range got {
				if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
					t.Fatalf("%s with x holding %v: row %d = %v, want a non-finite sum", name, bad, r, v)
				}
			}
		}
	}
}
