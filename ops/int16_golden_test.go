package ops_test

import (
	"math"
	"testing"

	"pistil/graph"
	"pistil/ops"
)

// The int16 decode path on the golden model's own activations: every row of every q4
// matmul of the mlx-q4 fixture's prompt, run alone as a decode step runs it (one row, the
// experts the token was routed to), must be the float64 product of its int16-rounded
// activations, so that a bug in the scales, the bias term, the rounding, a unit of groups
// or the experts' strided rows shows here on real outliers; what remains between int16 and
// float32 is the rounding, logged per matmul against its bound Σ_g max|x_g|/65,534·Σ|w_g|
// and required to stay within it.
func TestInt16GoldenMatmulsAreRoundedProducts(t *testing.T) {
	if !ops.HasInt16Kernel() {
		t.Skip("no int16 kernel on this machine")
	}
	u, bind, source := goldenPrompt(t)
	T := bind.T
	f32 := &ops.Env{Bind: bind, Workers: 2}
	int16 := &ops.Env{Bind: graph.Bindings{T: 1, N: T}, Workers: 2, Activations: ops.ActivationsInt16}
	checked := 0
	_, err := ops.RunObserved(u.Graph, f32, source, func(v *graph.Value, in, out []*ops.Tensor) {
		if (v.Op != "qmatmul" && v.Op != "expert_qmatmul") || in[1].DType != graph.Q4 {
			return
		}
		info, _ := ops.Default.Info(v.Op)
		x, w := in[0], in[1]
		K, M := w.Shape[len(w.Shape)-1], w.Shape[len(w.Shape)-2]
		decoded := make([]float32, w.Elements())
		for r := 0; r < len(decoded)/K; r++ {
			w.Row(r, K, decoded[r*K:(r+1)*K])
		}
		rows, perRow := x.Shape[0], x.Elements()/x.Shape[0] // a token's activations (k rows of K per slot, or one)
		worst, worstBound := 0.0, 0.0
		for p := 0; p < rows; p++ {
			xp := &ops.Tensor{DType: graph.F32, Shape: append([]int{1}, x.Shape[1:]...), Data: x.Data[p*perRow*4 : (p+1)*perRow*4]}
			args := []*ops.Tensor{xp, w}
			k := 1
			if v.Op == "expert_qmatmul" {
				k = in[2].Shape[1]
				args = append(args, &ops.Tensor{DType: graph.I32, Shape: []int{1, k}, Data: in[2].Data[p*k*4 : (p+1)*k*4]})
			}
			got := ops.NewTensor(graph.F32, append([]int{1}, out[0].Shape[1:]...)...)
			if err := info.Ref(int16, v, args, []*ops.Tensor{got}); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < k; j++ {
				src, wrow0 := xp.F32(), 0
				if v.Op == "expert_qmatmul" {
					wrow0 = int(args[2].I32()[j]) * M
					if len(x.Shape) == 3 {
						src = src[j*K : (j+1)*K] // one activation row per slot
					}
				}
				xhat, amax := roundInt16Groups(src[:K])
				for m := 0; m < M; m++ {
					row := decoded[(wrow0+m)*K : (wrow0+m+1)*K]
					var want, mag, bound float64
					for gi := 0; gi < K/64; gi++ {
						var wabs float64
						for i := gi * 64; i < (gi+1)*64; i++ {
							want += float64(row[i]) * xhat[i]
							mag += math.Abs(float64(row[i]) * xhat[i])
							wabs += math.Abs(float64(row[i]))
						}
						bound += amax[gi] / 65534 * wabs
					}
					at := j*M + m
					have := float64(got.F32()[at])
					if diff := math.Abs(have - want); diff > 2e-6*mag+1e-7 {
						t.Fatalf("%s %s token %d output %d: %v, the rounded activations' product is %v", v.Op, v.Name, p, at, have, want)
					}
					diff := math.Abs(have - float64(out[0].F32()[p*k*M+at]))
					if diff > bound+2e-6*mag+1e-7 {
						t.Fatalf("%s %s token %d output %d: int16 %v, float32 %v: |diff| %.3g past the rounding bound %.3g", v.Op, v.Name, p, at, have, out[0].F32()[p*k*M+at], diff, bound)
					}
					worst, worstBound = max(worst, diff), max(worstBound, diff/bound)
				}
			}
			checked++
		}
		t.Logf("%-14s %-38s max |int16 - f32| %.3g (%.2f of the rounding bound)", v.Op, v.Name, worst, worstBound)
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no q4 matmul in the golden prompt")
	}
}

// roundInt16Groups is x rounded per group of 64 as the int16 path rounds it (nearest of
// ±32,767 steps of max|x|/32,767, halves to even), with each group's max|x|.
func roundInt16Groups(x []float32) (xhat []float64, amax []float64) {
	xhat, amax = make([]float64, len(x)), make([]float64, len(x)/64)
	for g := range amax {
		var m float32
		for _, v := range x[g*64 : (g+1)*64] {
			m = max(m, float32(math.Abs(float64(v))))
		}
		amax[g] = float64(m)
		if m > 0 {
			for i := g * 64; i < (g+1)*64; i++ {
				xhat[i] = math.RoundToEven(float64(x[i]*(32767/m))) * float64(m/32767)
			}
		}
	}
	return xhat, amax
}
