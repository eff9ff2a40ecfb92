// Package randtensor makes the random tensors the per-op kernel cases run on: the CUDA
// backend's tests (cuda) and the Metal kernel checks (metal/kernelcheck, which a Mac's
// self-test runs) draw their inputs from the same generators, so a case means the same
// data on both.
package randtensor

import (
	"encoding/binary"
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
