package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// Test helpers: build a one-op graph over source tensors, run it through the interpreter
// (so every test also exercises Infer and Run), and compare results.

// typeOf is the constant graph type of a tensor.
func typeOf(t *Tensor) graph.Type {
	ty := graph.TensorType(t.DType, graph.S(t.Shape...)...)
	ty.Group = t.Group
	return ty
}

// opGraph declares op(args...) over input sources named a0, a1, ... and outputs each result
// element as out0, out1, ...
func opGraph(op string, attrs graph.Attrs, args ...*Tensor) (*graph.Graph, error) {
	b := graph.NewBuilder(graph.New(op), Default)
	srcs := make([]*graph.Value, len(args))
	for i, a := range args {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
	}
	v := b.Op(op, attrs, srcs...)
	addOutputs(b, v)
	return b.G, b.Err()
}

func addOutputs(b *graph.Builder, v *graph.Value) {
	if !v.Type.IsTuple() {
		b.G.AddOutput("out0", v)
		return
	}
	for i := range v.Type.Elems {
		b.G.AddOutput(fmt.Sprintf("out%d", i), b.Op("select", graph.Attrs{"index": int64(i)}, v))
	}
}

// runGraph runs g with inputs a0, a1, ... bound to args and returns out0, out1, ...
func runGraph(t *testing.T, g *graph.Graph, bind graph.Bindings, args ...*Tensor) []*Tensor {
	t.Helper()
	res, err := Run(g, &Env{Bind: bind, Workers: 3}, func(v *graph.Value) (*Tensor, error) {
		var i int
		fmt.Sscanf(v.Name, "a%d", &i)
		return args[i], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*Tensor, len(res))
	for i := range out {
		out[i] = res[fmt.Sprintf("out%d", i)]
	}
	return out
}

// runOp runs one op and returns its results.
func runOp(t *testing.T, op string, attrs graph.Attrs, bind graph.Bindings, args ...*Tensor) []*Tensor {
	t.Helper()
	g, err := opGraph(op, attrs, args...)
	if err != nil {
		t.Fatal(err)
	}
	return runGraph(t, g, bind, args...)
}

// runExpanded runs Expand(op) over the same sources.
func runExpanded(t *testing.T, op string, attrs graph.Attrs, bind graph.Bindings, args ...*Tensor) []*Tensor {
	t.Helper()
	info, _ := Default.Info(op)
	b := graph.NewBuilder(graph.New(op), Default)
	srcs := make([]*graph.Value, len(args))
	for i, a := range args {
		srcs[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
	}
	v := b.Op(op, attrs, srcs...)
	addOutputs(b, info.Expand(b, v))
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	return runGraph(t, b.G, bind, args...)
}

func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= tol*math.Max(1, math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %v, want %v (|diff| %.3g > %g)", what, i, got[i], want[i], d, tol)
		}
	}
}

func randF32(rng *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64()) * scale
	}
	return out
}

func randTensor(rng *rand.Rand, scale float32, shape ...int) *Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return FromF32(randF32(rng, n, scale), shape...)
}

// toBF16 converts an F32 tensor to BF16.
func toBF16(t *Tensor) *Tensor {
	out := NewTensor(graph.BF16, t.Shape...)
	for i, v := range t.F32() {
		u16(out.Data)[i] = F32ToBF16(v)
	}
	return out
}

// quantize encodes an F32 tensor [..., K] as MLX affine q4/q8 (min/max per group, bf16
// scale and bias), the way the checkpoints store it.
func quantize(t *Tensor, bits, group int) *Tensor {
	x := t.F32()
	K := t.Shape[len(t.Shape)-1]
	rows := len(x) / K
	groups := K / group
	out := &Tensor{DType: graph.Q4, Shape: append([]int(nil), t.Shape...), Group: group,
		Data: make([]byte, len(x)*bits/8), Scales: make([]byte, rows*groups*2), Biases: make([]byte, rows*groups*2)}
	if bits == 8 {
		out.DType = graph.Q8
	}
	levels := float32(int(1)<<bits - 1)
	for r := 0; r < rows; r++ {
		for g := 0; g < groups; g++ {
			vals := x[r*K+g*group : r*K+(g+1)*group]
			lo, hi := vals[0], vals[0]
			for _, v := range vals {
				lo, hi = min(lo, v), max(hi, v)
			}
			s := BF16ToF32(F32ToBF16(max((hi-lo)/levels, 1e-7)))
			b := BF16ToF32(F32ToBF16(lo))
			u16(out.Scales)[r*groups+g] = F32ToBF16(s)
			u16(out.Biases)[r*groups+g] = F32ToBF16(b)
			for j, v := range vals {
				q := uint32(min(max(float32(math.Round(float64((v-b)/s))), 0), levels))
				c := r*K + g*group + j
				word := c * bits / 32
				shift := uint(c*bits) % 32
				w := uint32(out.Data[4*word]) | uint32(out.Data[4*word+1])<<8 | uint32(out.Data[4*word+2])<<16 | uint32(out.Data[4*word+3])<<24
				w |= q << shift
				out.Data[4*word], out.Data[4*word+1], out.Data[4*word+2], out.Data[4*word+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
			}
		}
	}
	return out
}

// rowsOf decodes a weight with the general Tensor.Row, the reference decoder.
func rowsOf(t *Tensor) []float32 {
	K := t.Shape[len(t.Shape)-1]
	n := t.Elements() / K
	out := make([]float32, n*K)
	for r := 0; r < n; r++ {
		t.Row(r, K, out[r*K:(r+1)*K])
	}
	return out
}

// naiveMatmul is x[P,K] · w[M,K]ᵀ in float64.
func naiveMatmul(x, w []float32, K int) []float32 {
	P, M := len(x)/K, len(w)/K
	y := make([]float32, P*M)
	for p := 0; p < P; p++ {
		for m := 0; m < M; m++ {
			var s float64
			for k := 0; k < K; k++ {
				s += float64(x[p*K+k]) * float64(w[m*K+k])
			}
			y[p*M+m] = float32(s)
		}
	}
	return y
}
