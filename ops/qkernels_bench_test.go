package ops

import (
	"fmt"
	"math/rand"
	"testing"

	"pistil/graph"
)

// Benchmarks of the quantized matmuls at the shapes of the 35B-A3B: a [8192, 2048]
// projection (q_proj, 2048 -> 8192) and 8 routed experts of a [256, 512, 2048] stack
// (gate/up), for one decode token and a 64-token prefill chunk. MB/s is weight bytes
// (codes, scales, biases) read per second: the figure that bounds decode speed.
//
//	go test ./ops/ -run X -bench 'QMatmul' -benchtime 2s

var benchT = []int{1, 64}

var benchKernels = []string{KernelsReference, KernelsFast}

func BenchmarkQMatmul(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	for _, bits := range []int{4, 8} {
		w := randQuantized(rng, bits, 64, 8192, 2048)
		for _, T := range benchT {
			x := randTensor(rng, 1, T, 2048)
			g, _ := opGraph("qmatmul", nil, x, w)
			info, _ := Default.Info("qmatmul")
			out := []*Tensor{NewTensor(graph.F32, T, 8192)}
			for _, kernels := range benchKernels {
				b.Run(fmt.Sprintf("q%d/T=%d/%s", bits, T, kernels), func(b *testing.B) {
					env := &Env{Workers: 2, Kernels: kernels}
					b.SetBytes(int64(len(w.Data) + len(w.Scales) + len(w.Biases)))
					for b.Loop() {
						if err := info.Ref(env, g.Values[2], []*Tensor{x, w}, out); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

func BenchmarkExpertQMatmul(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	E, M, K, k := 256, 512, 2048, 8
	for _, bits := range []int{4, 8} {
		w := randQuantized(rng, bits, 64, E, M, K)
		for _, T := range benchT {
			x := randTensor(rng, 1, T, K)
			ids := NewTensor(graph.I32, T, k)
			used := map[int32]bool{}
			for t := 0; t < T; t++ {
				for j, e := range rng.Perm(E)[:k] {
					ids.I32()[t*k+j] = int32(e)
					used[int32(e)] = true
				}
			}
			g, _ := opGraph("expert_qmatmul", nil, x, w, ids)
			info, _ := Default.Info("expert_qmatmul")
			out := []*Tensor{NewTensor(graph.F32, T, k, M)}
			for _, kernels := range benchKernels {
				b.Run(fmt.Sprintf("q%d/T=%d/%s", bits, T, kernels), func(b *testing.B) {
					env := &Env{Workers: 2, Kernels: kernels}
					b.SetBytes(int64(len(used)) * int64(len(w.Data)+len(w.Scales)+len(w.Biases)) / int64(E))
					for b.Loop() {
						if err := info.Ref(env, g.Values[3], []*Tensor{x, w, ids}, out); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// randQuantized is a quantized tensor with random codes, scales and biases: fast to make
// at full model size, and as good as real weights for timing.
func randQuantized(rng *rand.Rand, bits, group int, shape ...int) *Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	t := &Tensor{DType: graph.Q4, Shape: shape, Group: group,
		Data: make([]byte, n*bits/8), Scales: make([]byte, n/group*2), Biases: make([]byte, n/group*2)}
	if bits == 8 {
		t.DType = graph.Q8
	}
	rng.Read(t.Data)
	for i := range u16(t.Scales) {
		u16(t.Scales)[i] = F32ToBF16(float32(rng.NormFloat64()) * 0.01)
		u16(t.Biases)[i] = F32ToBF16(float32(rng.NormFloat64()) * 0.1)
	}
	return t
}

// BenchmarkQuantKernels times the kernels alone on one core: 256 rows of 2048 (in the L2
// cache), one activation row (dot1) or four (dot4). MB/s is weight bytes per second.
func BenchmarkQuantKernels(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const M, K = 256, 2048
	for _, bits := range []int{4, 8} {
		wt := randQuantized(rng, bits, 64, M, K)
		w, err := newWeightRows(wt)
		if err != nil {
			b.Fatal(err)
		}
		x := randF32(rng, 4*K, 1)
		// run times kernel over the weight's rows, step rows a call (its first row r).
		run := func(name string, step int, kernel func(r int)) {
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(len(wt.Data) + len(wt.Scales) + len(wt.Biases)))
				for b.Loop() {
					for r := 0; r < M; r += step {
						kernel(r)
					}
				}
			})
		}
		for _, ks := range quantKernelSets {
			one, four := actsWith(ks, w, x, 1), actsWith(ks, w, x, 4)
			bi := bitsIndex(wt.DType)
			run(fmt.Sprintf("%s/q%d/dot1", ks.name, bits), 1, func(r int) {
				data, scales, biases := w.locate(r)
				ks.dot1[bi](data, scales, biases, 64, one.x, one.xsum)
			})
			if bits == 4 && ks.q4Dot8 != nil {
				eight := prepareActs(nil, w, randF32(rng, 8*K, 1), 8)
				var out [8]float32
				run(fmt.Sprintf("%s/q4/dot8", ks.name), 1, func(r int) {
					data, scales, biases := w.locate(r)
					ks.q4Dot8(data, scales, biases, 64, eight.x, K, &out)
				})
				if ks.q4Dot8x2 != nil {
					var out [16]float32
					run(fmt.Sprintf("%s/q4/dot8x2", ks.name), 2, func(r int) {
						data, scales, biases := w.locateRun(r, 2)
						ks.q4Dot8x2(data, K/2, scales, biases, K/64, 64, eight.x, K, &out)
					})
				}
			}
			if bits == 4 && ks.q4Dot1x4 != nil {
				var out [4]float32
				run(fmt.Sprintf("%s/q4/dot1x4", ks.name), 4, func(r int) {
					data, scales, biases := w.locateRun(r, 4)
					ks.q4Dot1x4(data, scales, biases, 64, one.x, &out)
				})
			}
			var out [4]float32
			run(fmt.Sprintf("%s/q%d/dot4", ks.name, bits), 1, func(r int) {
				data, scales, biases := w.locate(r)
				ks.dot4[bi](data, scales, biases, 64, four.x, K, four.xsum, &out)
			})
		}
	}
}

// BenchmarkQMatmulStream cycles a decode-shaped q4 qmatmul through 40 different
// [8192, 2048] matrices (377 MB, more than the caches) so the weights come from memory,
// as the 1.67 GB of a real decode step do.
func BenchmarkQMatmulStream(b *testing.B) {
	var envs []namedEnv
	for _, kernels := range benchKernels {
		envs = append(envs, namedEnv{kernels, &Env{Workers: 2, Kernels: kernels}})
	}
	benchQMatmulStream(b, envs)
}

// namedEnv is one sub-benchmark's environment.
type namedEnv struct {
	name string
	env  *Env
}

// benchQMatmulStream runs BenchmarkQMatmulStream's streaming qmatmul under each env, one
// sub-benchmark each, reporting the weight bytes per second.
func benchQMatmulStream(b *testing.B, envs []namedEnv) {
	rng := rand.New(rand.NewSource(1))
	ws := make([]*Tensor, 40)
	for i := range ws {
		ws[i] = randQuantized(rng, 4, 64, 8192, 2048)
	}
	x := randTensor(rng, 1, 1, 2048)
	g, _ := opGraph("qmatmul", nil, x, ws[0])
	info, _ := Default.Info("qmatmul")
	out := []*Tensor{NewTensor(graph.F32, 1, 8192)}
	for _, e := range envs {
		b.Run(e.name, func(b *testing.B) {
			b.SetBytes(int64(len(ws[0].Data) + len(ws[0].Scales) + len(ws[0].Biases)))
			i := 0
			for b.Loop() {
				if err := info.Ref(e.env, g.Values[2], []*Tensor{x, ws[i%len(ws)]}, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkPrefillChunk is a full 512-token prefill chunk (pipeline.toml prefill_chunk)
// with the fast kernels only (the reference takes seconds), float32 and int8 activations
// (each int8 kernel of the machine but the portable one):
// the q4 [8192, 2048] projection, the q4 routed experts' gate/up (8 of 256 [512, 2048]
// per token, about 16 tokens per expert), down ([2048, 512]: rows of 8 groups), and gate
// and up with the SwiGLU (expert_matmul_swiglu).
// GFLOP/s is 2 flops per multiply-add; MB/s is millions of multiply-adds per second.
//
//	go test ./ops/ -run X -bench PrefillChunk -benchtime 3x
func BenchmarkPrefillChunk(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	const T, K = 512, 2048
	x := randTensor(rng, 1, T, K)
	const E, I, k = 256, 512, 8
	ids := NewTensor(graph.I32, T, k)
	for t := 0; t < T; t++ {
		for j, e := range rng.Perm(E)[:k] {
			ids.I32()[t*k+j] = int32(e)
		}
	}
	proj := randQuantized(rng, 4, 64, 8192, K)
	gateUp := randQuantized(rng, 4, 64, E, I, K)
	up := randQuantized(rng, 4, 64, E, I, K)
	down := randQuantized(rng, 4, 64, E, K, I)
	xDown := randTensor(rng, 1, T, k, I)
	cases := []struct {
		name string
		op   string
		args []*Tensor
		out  *Tensor
		macs int64
	}{
		{"qmatmul", "qmatmul", []*Tensor{x, proj}, NewTensor(graph.F32, T, 8192), T * 8192 * K},
		{"expert_qmatmul", "expert_qmatmul", []*Tensor{x, gateUp, ids}, NewTensor(graph.F32, T, k, I), T * k * I * K},
		{"expert_down", "expert_qmatmul", []*Tensor{xDown, down, ids}, NewTensor(graph.F32, T, k, K), T * k * K * I},
		{"expert_swiglu", "expert_matmul_swiglu", []*Tensor{x, gateUp, up, ids}, NewTensor(graph.F32, T, k, I), 2 * T * k * I * K},
	}
	// int8 with every int8 kernel of the machine but the portable one (seconds a call).
	type choice struct{ name, acts, kernel string }
	choices := []choice{{ActivationsF32, ActivationsF32, ""}}
	for _, name := range int8KernelNames() {
		if name != "go" {
			choices = append(choices, choice{ActivationsInt8 + "/" + name, ActivationsInt8, name})
		}
	}
	best := int8KernelName
	defer SetInt8Kernel(best)
	for _, c := range cases {
		for _, ch := range choices {
			b.Run(c.name+"/"+ch.name, func(b *testing.B) {
				if ch.kernel != "" {
					if err := SetInt8Kernel(ch.kernel); err != nil {
						b.Fatal(err)
					}
				}
				g, _ := opGraph(c.op, nil, c.args...)
				info, _ := Default.Info(c.op)
				env := &Env{Workers: 2, Activations: ch.acts}
				b.SetBytes(c.macs)
				for b.Loop() {
					if err := info.Ref(env, g.Values[len(c.args)], c.args, []*Tensor{c.out}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(2*c.macs)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkRouterPrefill is the router and the experts' combine over a 512-token prefill
// chunk at the 35B-A3B's shapes (256 experts, top 8, hidden 2048), on one and two workers:
// both loops are per token, so a prefill step splits them (routerParallelFrom).
func BenchmarkRouterPrefill(b *testing.B) {
	rng := rand.New(rand.NewSource(2))
	const T, E, k, H = 512, 256, 8, 2048
	logits := randTensor(rng, 2, T, E)
	ys := randTensor(rng, 1, T, k, H)
	weights, ids := NewTensor(graph.F32, T, k), NewTensor(graph.I32, T, k)
	combined := NewTensor(graph.F32, T, H)
	route, err := opGraph("router", graph.Attrs{"k": int64(k)}, logits)
	if err != nil {
		b.Fatal(err)
	}
	combine, err := opGraph("moe_combine", nil, ys, weights)
	if err != nil {
		b.Fatal(err)
	}
	for _, workers := range []int{1, 2} {
		env := &Env{Workers: workers}
		b.Run(fmt.Sprintf("router/workers=%d", workers), func(b *testing.B) {
			for range b.N {
				if err := refRouter(env, route.Values[1], []*Tensor{logits}, []*Tensor{weights, ids}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("moe_combine/workers=%d", workers), func(b *testing.B) {
			for range b.N {
				if err := refMoECombine(env, combine.Values[2], []*Tensor{ys, weights}, []*Tensor{combined}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
