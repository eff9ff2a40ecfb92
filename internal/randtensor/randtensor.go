// Package randtensor makes the random tensors the per-op kernel cases run on: the CUDA
// backend's tests (cuda) and the Metal kernel checks (metal/kernelcheck, which a Mac's
// self-test runs) draw their inputs from the same generators, so a case means the same
// data on both.
package randtensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"pistil/graph"
	"pistil/ops"
)

// F32 is a float32 tensor of standard normal values.
func F32(r *rand.Rand, shape ...int) *ops.Tensor {
	t := ops.NewTensor(graph.F32, shape...)
	for i := range t.F32() {
		t.F32()[i] = float32(r.NormFloat64())
	}
	return t
}

// Scaled multiplies a float32 tensor by f in place and returns it.
func Scaled(t *ops.Tensor, f float32) *ops.Tensor {
	for i := range t.F32() {
		t.F32()[i] *= f
	}
	return t
}

// BF16 is a bf16 tensor of standard normal values.
func BF16(r *rand.Rand, shape ...int) *ops.Tensor {
	t := ops.NewTensor(graph.BF16, shape...)
	for i := 0; i < t.Elements(); i++ {
		binary.LittleEndian.PutUint16(t.Data[2*i:], ops.F32ToBF16(float32(r.NormFloat64())))
	}
	return t
}

// Quant is a quantized weight of dtype dt (q4 or q8) in groups of 64: random codes, bf16
// scales in [0, 0.02) and biases of standard deviation 0.1 (the model's magnitudes).
func Quant(r *rand.Rand, dt graph.DType, shape ...int) *ops.Tensor {
	t := &ops.Tensor{DType: dt, Shape: shape, Group: 64}
	n := t.Elements()
	t.Data = make([]byte, n*dt.Bits()/8)
	for i := range t.Data {
		t.Data[i] = byte(r.UintN(256))
	}
	groups := n / 64
	t.Scales, t.Biases = make([]byte, 2*groups), make([]byte, 2*groups)
	for i := 0; i < groups; i++ {
		binary.LittleEndian.PutUint16(t.Scales[2*i:], ops.F32ToBF16(float32(r.Float64()*0.02)))
		binary.LittleEndian.PutUint16(t.Biases[2*i:], ops.F32ToBF16(float32(r.NormFloat64()*0.1)))
	}
	return t
}

// IDs is an int32 tensor of the given values.
func IDs(vals []int32, shape ...int) *ops.Tensor {
	t := ops.NewTensor(graph.I32, shape...)
	copy(t.I32(), vals)
	return t
}

// Routed is [T, k] expert ids: for each token k distinct experts of E, in random order.
func Routed(r *rand.Rand, T, k, E int) *ops.Tensor {
	v := make([]int32, T*k)
	for i := 0; i < T; i++ {
		perm := r.Perm(E)
		for j := 0; j < k; j++ {
			v[i*k+j] = int32(perm[j])
		}
	}
	return IDs(v, T, k)
}

// Dense is a float32 or bf16 tensor of standard normal values, by dt.
func Dense(r *rand.Rand, dt graph.DType, shape ...int) *ops.Tensor {
	if dt == graph.BF16 {
		return BF16(r, shape...)
	}
	return F32(r, shape...)
}

// GatedDeltaStepInputs are a one-token gated_delta_step's arguments: the in_proj_qkv
// output of Hk, Hk and Hv heads (key dim Dk, value dim Dv) and 3 channels past them, a and
// b, the conv state of stateDType, the conv weight, A_log, dt_bias and the recurrent state.
func GatedDeltaStepInputs(r *rand.Rand, Hk, Hv, Dk, Dv int, stateDType graph.DType) []*ops.Tensor {
	CD := 2*Hk*Dk + Hv*Dv + 3
	st := Dense(r, stateDType, 3, CD)
	return []*ops.Tensor{F32(r, 1, CD), F32(r, 1, Hv), F32(r, 1, Hv), st, BF16(r, CD, 4), Scaled(F32(r, Hv), 0.5),
		BF16(r, Hv), Scaled(F32(r, Hv, Dk, Dv), 0.3)}
}

// ConvL2Inputs are a conv1d_silu_l2's arguments: T tokens of Ch channels, the conv state
// of stateDType for K taps, and the conv weight.
func ConvL2Inputs(r *rand.Rand, T, Ch, K int, stateDType graph.DType) []*ops.Tensor {
	st := Dense(r, stateDType, K-1, Ch)
	return []*ops.Tensor{F32(r, T, Ch), st, BF16(r, Ch, K)}
}

// GatedDeltaNormInputs are a one-token gated_delta_norm's arguments: q and k of Hk heads
// of Dk scaled as L2-normed heads roughly are, v, g and beta of Hv heads, the state, the
// norm's gate z (heads of Dv), and a norm weight of normDType.
func GatedDeltaNormInputs(r *rand.Rand, Hk, Hv, Dk, Dv int, normDType graph.DType) []*ops.Tensor {
	norm := Dense(r, normDType, Dv)
	qk := float32(1 / math.Sqrt(float64(Dk)))
	return []*ops.Tensor{Scaled(F32(r, 1, Hk, Dk), qk), Scaled(F32(r, 1, Hk, Dk), qk),
		F32(r, 1, Hv, Dv), Scaled(F32(r, 1, Hv), 0.1), F32(r, 1, Hv),
		Scaled(F32(r, Hv, Dk, Dv), 0.3), F32(r, 1, Hv, Dv), norm}
}

// GatedDeltaPrefillInputs are a gated_delta's arguments for T tokens as a prefill step
// of the model sees them: q and k of Hk heads of Dk L2-normed (q then scaled by Dk^-1/2,
// as the model's q_scale does), v of Hv heads of Dv, the log-decay g <= 0 (most near
// 0, some far below, as exp(A_log)·softplus(...) gives), beta in (0, 1) (a sigmoid), and
// the state S [Hv, Dk, Dv].
func GatedDeltaPrefillInputs(r *rand.Rand, T, Hk, Hv, Dk, Dv int) []*ops.Tensor {
	q, k := F32(r, T, Hk, Dk), F32(r, T, Hk, Dk)
	for _, x := range []*ops.Tensor{q, k} {
		scale := 1.0
		if x == q {
			scale = 1 / math.Sqrt(float64(Dk))
		}
		xs := x.F32()
		for h := 0; h < T*Hk; h++ {
			row := xs[h*Dk : (h+1)*Dk]
			var ss float64
			for _, v := range row {
				ss += float64(v) * float64(v)
			}
			f := float32(scale / math.Sqrt(ss+1e-6))
			for i := range row {
				row[i] *= f
			}
		}
	}
	g, beta := ops.NewTensor(graph.F32, T, Hv), ops.NewTensor(graph.F32, T, Hv)
	for i := range g.F32() {
		g.F32()[i] = float32(-0.2 * math.Abs(r.NormFloat64()))
		if r.IntN(16) == 0 {
			g.F32()[i] *= 20
		}
		beta.F32()[i] = float32(1 / (1 + math.Exp(-r.NormFloat64())))
	}
	return []*ops.Tensor{q, k, F32(r, T, Hv, Dv), g, beta, Scaled(F32(r, Hv, Dk, Dv), 0.3)}
}
