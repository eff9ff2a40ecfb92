package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Rotary position embedding, rotate-half (GPT-NeoX) pairing (i, i+dims/2) on the first
// dims of each head; the rest of the head passes through. Token t sits at position C+t.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "rope", Doc: "rotate-half RoPE on the first {dims} dims at positions C+t", Args: 1,
			Flags: graph.StepScalars, Attrs: []string{"dims", "theta"}, Infer: inferRoPE},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			c := plainCost(v, b, 0)
			rows := elemsOf(v.Type, b) / int64(max(last(v.Type.Shape).Eval(b), 1))
			c.Flops = rows * int64(v.Attrs.Int("dims")) * 3
			return c
		},
		Ref: refRoPE,
	})
}

func inferRoPE(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "x", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := requireAttrs(v, "dims", "theta"); err != nil {
		return graph.Type{}, err
	}
	D, err := constDim("rope head dim", x.Shape[2])
	if err != nil {
		return graph.Type{}, err
	}
	dims := v.Attrs.Int("dims")
	if dims <= 0 || dims%2 != 0 || dims > D {
		return graph.Type{}, fmt.Errorf("rope dims %d must be even, positive and at most the head dim %d", dims, D)
	}
	if _, err := positiveFloatAttr(v, "theta"); err != nil {
		return graph.Type{}, err
	}
	return x, nil
}

// ropeInvFreq mirrors Hugging Face: 1 / theta^(2i/dims) rounded to float32.
func ropeInvFreq(dims int, theta float64) []float32 {
	f := make([]float32, dims/2)
	for i := range f {
		f[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(dims)))
	}
	return f
}

func refRoPE(env *Env, v *graph.Value, in, out []*Tensor) error {
	dims := v.Attrs.Int("dims")
	half := dims / 2
	inv := ropeInvFreq(dims, v.Attrs.Float("theta"))
	shape := in[0].Shape
	T, heads, D := shape[0], shape[1], shape[2]
	x, y := in[0].F32(), out[0].F32()
	if len(x) == 0 {
		return nil
	}
	if &x[0] != &y[0] {
		copy(y, x)
	}
	cos, sin := make([]float32, half), make([]float32, half)
	for t := 0; t < T; t++ {
		pos := float32(env.Bind.C + t)
		for i, f := range inv {
			// The angle is a float32 product, as in the reference, then cos/sin of it.
			a := float64(pos * f)
			cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		for h := 0; h < heads; h++ {
			row := y[(t*heads+h)*D:]
			for i := 0; i < half; i++ {
				x0, x1 := row[i], row[i+half]
				row[i] = x0*cos[i] - x1*sin[i]
				row[i+half] = x1*cos[i] + x0*sin[i]
			}
		}
	}
	return nil
}
