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
		x := in[0]
		// Each token's row alone, as decode runs it, into its place of the op's output.
		got := ops.NewTensor(graph.F32, out[0].Shape...)
		tokens, perToken, outPerToken := x.Shape[0], x.Elements()/x.Shape[0]*4, out[0].Elements()/x.Shape[0]*4
		for p := 0; p < tokens; p++ {
			args := []*ops.Tensor{{DType: graph.F32, Shape: append([]int{1}, x.Shape[1:]...), Data: x.Data[p*perToken : (p+1)*perToken]}, in[1]}
			if v.Op == "expert_qmatmul" {
				k := in[2].Shape[1]
				args = append(args, &ops.Tensor{DType: graph.I32, Shape: []int{1, k}, Data: in[2].Data[p*k*4 : (p+1)*k*4]})
			}
			row := &ops.Tensor{DType: graph.F32, Shape: append([]int{1}, out[0].Shape[1:]...), Data: got.Data[p*outPerToken : (p+1)*outPerToken]}
			if err := info.Ref(int16, v, args, []*ops.Tensor{row}); err != nil {
				t.Fatal(err)
			}
		}
		worst, worstBound := 0.0, 0.0
		for _, d := range roundedProducts(v.Op, in, 32767, 1) {
			have := float64(got.F32()[d.out])
			if diff := math.Abs(have - d.want); diff > 2e-6*d.mag+1e-7 {
				t.Fatalf("%s %s output %d: %v, the rounded activations' product is %v", v.Op, v.Name, d.out, have, d.want)
			}
			diff := math.Abs(have - float64(out[0].F32()[d.out]))
			if diff > d.bound+2e-6*d.mag+1e-7 {
				t.Fatalf("%s %s output %d: int16 %v, float32 %v: |diff| %.3g past the rounding bound %.3g", v.Op, v.Name, d.out, have, out[0].F32()[d.out], diff, d.bound)
			}
			worst, worstBound = max(worst, diff), max(worstBound, diff/d.bound)
		}
		checked++
		t.Logf("%-14s %-38s max |int16 - f32| %.3g (%.2f of the rounding bound)", v.Op, v.Name, worst, worstBound)
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no q4 matmul in the golden prompt")
	}
}
