package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Normalizations over the last dimension, statistics in float32. The zero-centred (1+w)
// convention is the loader's business: these ops multiply by the weight as given.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "rms_norm", Doc: "x / sqrt(mean(x²)+eps) * w over the last dim", Args: 2,
			Attrs: []string{"eps"}, Infer: inferRMSNorm},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 4) },
		Ref:  refRMSNorm,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "l2_norm", Doc: "scale * x / sqrt(Σx² + eps) over the last dim", Args: 1,
			Attrs: []string{"eps", "scale"}, Infer: inferL2Norm},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 4) },
		Ref:  refL2Norm,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "gated_rms_norm", Doc: "w * rms_norm(x) * silu(z) over the last dim", Args: 3,
			Attrs: []string{"eps"}, Infer: inferGatedRMSNorm},
		Cost: func(v *graph.Value, b graph.Bindings) Cost { return plainCost(v, b, 8) },
		Ref:  refGatedRMSNorm,
	})
}

// normWeight checks a norm weight [D] against x's last dimension.
func normWeight(v *graph.Value, i int, x graph.Type) error {
	w, err := wantRank(v, i, "w", 1, floatDTypes...)
	if err != nil {
		return err
	}
	return sameDim("norm width (x last vs w)", last(x.Shape), w.Shape[0])
}

func inferRMSNorm(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	x, err := wantMinRank(v, 0, "x", 1, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := normWeight(v, 1, x); err != nil {
		return graph.Type{}, err
	}
	if _, err := positiveFloatAttr(v, "eps"); err != nil {
		return graph.Type{}, err
	}
	return x, nil
}

func inferL2Norm(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantMinRank(v, 0, "x", 1, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if _, err := positiveFloatAttr(v, "eps"); err != nil {
		return graph.Type{}, err
	}
	if _, err := positiveFloatAttr(v, "scale"); err != nil {
		return graph.Type{}, err
	}
	return x, nil
}

func inferGatedRMSNorm(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 3); err != nil {
		return graph.Type{}, err
	}
	x, err := wantMinRank(v, 0, "x", 1, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	z, err := wantDType(v, 1, "z", graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if !z.Shape.Equal(x.Shape) {
		return graph.Type{}, fmt.Errorf("gate z %s does not match x %s", z.Shape, x.Shape)
	}
	if err := normWeight(v, 2, x); err != nil {
		return graph.Type{}, err
	}
	if _, err := positiveFloatAttr(v, "eps"); err != nil {
		return graph.Type{}, err
	}
	return x, nil
}

// invRMS is 1/sqrt(mean(x²)+eps) with float32 accumulation.
func invRMS(x []float32, eps float32) float32 {
	mean := dot(x, x) / float32(len(x))
	return float32(1 / math.Sqrt(float64(mean+eps)))
}

func refRMSNorm(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, release, err := floatsScratch(in[1])
	if err != nil {
		return fmt.Errorf("rms_norm weight: %w", err)
	}
	defer release()
	eps := float32(v.Attrs.Float("eps"))
	rmsNormRows(env, in[0].F32(), out[0].F32(), w, eps)
	return nil
}

// rmsNormRows normalises every row of x (rows of len(w)) into y and scales by w.
func rmsNormRows(env *Env, x, y, w []float32, eps float32) {
	D := len(w)
	normRows(env, len(x)/D, D, func(r int) {
		xr, yr := x[r*D:(r+1)*D], y[r*D:(r+1)*D]
		scaleRow(env, yr, xr, w, invRMS(xr, eps), 0)
	})
}

// scaleRowsFast and addRowsFast, where the machine has them (norm_amd64.s), are
// scaleRow's and addRow's loops in vector registers over the first elements of x (a
// multiple of the vector), returning how many they did: the same operations in the same
// order, so the same bits. A decode step's norms (a row of 2,048 to 4,096) ran them as
// scalar Go, a few microseconds each, about a hundred and fifty a token of the full model.
var (
	scaleRowsFast func(y, x, w []float32, a, b float32) int
	addRowsFast   func(s, a, b []float32) int
)

// scaleRow writes y[i] = (x[i]·a)·w[i], or (x[i]·a)·b where w is nil: a norm's scaling.
func scaleRow(env *Env, y, x, w []float32, a, b float32) {
	i := 0
	if scaleRowsFast != nil && !env.referenceKernels() {
		i = scaleRowsFast(y, x, w, a, b)
	}
	if w != nil {
		for ; i < len(x); i++ {
			y[i] = (x[i] * a) * w[i]
		}
		return
	}
	for ; i < len(x); i++ {
		y[i] = (x[i] * a) * b
	}
}

// addRow writes s[i] = a[i] + b[i].
func addRow(env *Env, s, a, b []float32) {
	i := 0
	if addRowsFast != nil && !env.referenceKernels() {
		i = addRowsFast(s, a, b)
	}
	for ; i < len(a); i++ {
		s[i] = a[i] + b[i]
	}
}

// normRows runs norm(r) for every row r < n of D elements, split over env's workers
// when there are enough (a prefill chunk; a decode row is done before goroutines start).
// Rows are independent, so the split changes no result.
func normRows(env *Env, n, D int, norm func(r int)) {
	if n*D < 1<<16 {
		for r := 0; r < n; r++ {
			norm(r)
		}
		return
	}
	parallelRange(env, n, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			norm(r)
		}
	})
}

func refL2Norm(env *Env, v *graph.Value, in, out []*Tensor) error {
	eps := float32(v.Attrs.Float("eps"))
	scale := float32(v.Attrs.Float("scale"))
	x, y := in[0].F32(), out[0].F32()
	D := in[0].Shape[len(in[0].Shape)-1]
	normRows(env, len(x)/D, D, func(r int) {
		xr, yr := x[r*D:(r+1)*D], y[r*D:(r+1)*D]
		scaleRow(env, yr, xr, nil, float32(1/math.Sqrt(float64(dot(xr, xr)+eps))), scale)
	})
	return nil
}

func refGatedRMSNorm(env *Env, v *graph.Value, in, out []*Tensor) error {
	w, release, err := floatsScratch(in[2])
	if err != nil {
		return fmt.Errorf("gated_rms_norm weight: %w", err)
	}
	defer release()
	eps := float32(v.Attrs.Float("eps"))
	x, z, y, D := in[0].F32(), in[1].F32(), out[0].F32(), len(w)
	act := siluFor(env)
	vector := siluMulFast != nil && !env.referenceKernels() && (len(z) == 0 || len(y) == 0 || &y[0] != &z[0])
	normRows(env, len(x)/D, D, func(r int) {
		xr, zr, yr := x[r*D:(r+1)*D], z[r*D:(r+1)*D], y[r*D:(r+1)*D]
		inv := invRMS(xr, eps)
		if vector { // the SiLU in vector registers, over the normed row (y is not z)
			scaleRow(env, yr, xr, w, inv, 0) // (x·inv)·w: the same product as w·(x·inv)
			for i := siluMulFast(yr, zr, yr); i < D; i++ {
				yr[i] *= act(zr[i])
			}
			return
		}
		for i, xv := range xr {
			yr[i] = w[i] * (xv * inv) * act(zr[i])
		}
	})
	return nil
}
