package ops_test

import (
	"fmt"
	"math"
	"testing"

	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
	"pistil/passes"
)

// The int8 matmuls on the golden model's own activations (the random inputs of the unit
// tests have no outliers and no routing): at every q4 matmul of the mlx-q4 fixture's
// prompt, the int8 result with each kernel must be the float64 product of the rounded
// activations, so that a bug in the scale, the bias term, the rounding, saturation, a
// group boundary, a partial block or the experts' row gather shows here; what remains
// between int8 and float32 is the rounding, logged per matmul against its bound.
func TestInt8GoldenMatmulsAreRoundedProducts(t *testing.T) {
	kernels := []string{"avx2", "avxvnni", "avx512vnni"}
	best := ops.Int8KernelName()
	if best == "" {
		t.Skip("no int8 kernel on this machine")
	}
	defer ops.SetInt8Kernel(best)
	u, bind, source := goldenPrompt(t)
	f32 := &ops.Env{Bind: bind, Workers: 2}
	int8 := &ops.Env{Bind: bind, Workers: 2, Activations: ops.ActivationsInt8}
	checked := 0
	_, err := ops.RunObserved(u.Graph, f32, source, func(v *graph.Value, in, out []*ops.Tensor) {
		if (v.Op != "qmatmul" && v.Op != "expert_qmatmul") || in[1].DType != graph.Q4 || in[0].Shape[0] < 2 {
			return
		}
		info, _ := ops.Default.Info(v.Op)
		products := roundedProducts(v.Op, in, 127, 2)
		for _, kernel := range kernels {
			if ops.SetInt8Kernel(kernel) != nil {
				continue
			}
			got := ops.NewTensor(graph.F32, out[0].Shape...)
			if err := info.Ref(int8, v, in, []*ops.Tensor{got}); err != nil {
				t.Fatal(err)
			}
			worst, worstBound := 0.0, 0.0
			for _, d := range products {
				if diff := math.Abs(float64(got.F32()[d.out]) - d.want); diff > 1e-6*d.mag+1e-7 {
					t.Fatalf("%s %s (%s) output %d: %v, the rounded activations' product is %v", v.Op, v.Name, kernel, d.out, got.F32()[d.out], d.want)
				}
				diff := math.Abs(float64(got.F32()[d.out] - out[0].F32()[d.out]))
				worst, worstBound = max(worst, diff), max(worstBound, diff/d.bound)
			}
			if kernel == best {
				t.Logf("%-14s %-38s max |int8 - f32| %.3g (%.2f of the rounding bound)", v.Op, v.Name, worst, worstBound)
			}
			checked++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no q4 matmul of more than one row in the golden prompt")
	}
}

// goldenPrompt is the mlx-q4 golden fixture's prompt as one prefill step, fused as the CPU
// runs it: the unit, its bindings and the source of its weights, states and tokens (the
// checkpoint closes when t ends).
func goldenPrompt(t *testing.T) (*passes.Unit, graph.Bindings, func(v *graph.Value) (*ops.Tensor, error)) {
	t.Helper()
	dir := fixtures.Path("golden/tiny-s1/mlx-q4")
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	g, err := qwen35moe.Build(ck.Config(), qwen35moe.BuildOptions{WeightType: ck.WeightType, KVDType: graph.F32, ConvStateDType: graph.F32, AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := safetensors.Open(dir + "/reference.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	tokens, err := ref.Data("tokens")
	if err != nil {
		t.Fatal(err)
	}
	tokens = append([]byte(nil), tokens...) // the source outlives the reference file
	T := len(tokens) / 4
	u := &passes.Unit{Graph: g.Clone(), Phase: passes.Phase{Name: "prefill", Tokens: T}, Ops: ops.Default}
	if err := passes.Run(u, passes.Config{Check: true}, "fuse-dequant"); err != nil {
		t.Fatal(err)
	}
	bind := graph.Bindings{T: T, N: T}
	source := func(v *graph.Value) (*ops.Tensor, error) {
		switch v.Op {
		case graph.OpWeight:
			return ck.Tensor(v.Name)
		case graph.OpState:
			return ops.NewTensor(v.Type.DType, v.Type.Shape.Eval(bind)...), nil
		case graph.OpInput:
			return &ops.Tensor{DType: graph.I32, Shape: []int{T}, Data: tokens}, nil
		}
		return nil, fmt.Errorf("source %s", v.Op)
	}
	return u, bind, source
}

// rounded is one output of a matmul over rounded activations as the float64 product of
// the rounded activations (want), the magnitude of its terms (mag) and the bound of the
// rounding's effect, Σ_g max|x_g|/(2·steps)·Σ|w_g| (bound).
type rounded struct {
	out              int
	want, mag, bound float64
}

// roundedProducts lists the outputs a path that rounds each group of 64 activations to
// ±steps steps of max|x|/steps computes: every output of a qmatmul, and the rows of an
// expert_qmatmul whose expert has at least minRows (int8 prefill leaves an expert's one
// row to the float32 kernels: 127 and 2; int16 decode takes every row: 32,767 and 1).
func roundedProducts(op string, in []*ops.Tensor, steps float32, minRows int) []rounded {
	x, w := in[0], in[1]
	K, M := w.Shape[len(w.Shape)-1], w.Shape[len(w.Shape)-2]
	xs := x.F32()
	type job struct{ src, wrow, out int }
	var jobs []job
	if op == "qmatmul" {
		for p := 0; p < len(xs)/K; p++ {
			for m := 0; m < M; m++ {
				jobs = append(jobs, job{p, m, p*M + m})
			}
		}
	} else {
		ids, k := in[2].I32(), in[2].Shape[1]
		count := map[int32]int{}
		for _, id := range ids {
			count[id]++
		}
		for r, id := range ids {
			if count[id] < minRows {
				continue
			}
			src := r
			if len(x.Shape) == 2 {
				src = r / k // one activation row per token
			}
			for m := 0; m < M; m++ {
				jobs = append(jobs, job{src, int(id)*M + m, r*M + m})
			}
		}
	}
	decoded := make([]float32, w.Elements())
	for r := 0; r < len(decoded)/K; r++ {
		w.Row(r, K, decoded[r*K:(r+1)*K])
	}
	// The rounded activations and their groups' max|x|, once per source row.
	xhat := make([]float64, len(xs))
	amax := make([]float64, len(xs)/64)
	for g := range amax {
		var m float32
		for _, v := range xs[g*64 : (g+1)*64] {
			m = max(m, float32(math.Abs(float64(v))))
		}
		amax[g] = float64(m)
		if m > 0 {
			for i := g * 64; i < (g+1)*64; i++ {
				xhat[i] = math.RoundToEven(float64(xs[i]*(steps/m))) * float64(m/steps)
			}
		}
	}
	var res []rounded
	for _, j := range jobs {
		row := decoded[j.wrow*K : (j.wrow+1)*K]
		d := rounded{out: j.out}
		for g := 0; g < K/64; g++ {
			var wabs float64
			for i := g * 64; i < (g+1)*64; i++ {
				xh := xhat[j.src*K+i]
				d.want += float64(row[i]) * xh
				d.mag += math.Abs(float64(row[i]) * xh)
				wabs += math.Abs(float64(row[i]))
			}
			d.bound += amax[j.src*K/64+g] / (2 * float64(steps)) * wabs
		}
		res = append(res, d)
	}
	return res
}
