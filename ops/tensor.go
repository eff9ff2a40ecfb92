package ops

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"pistil/graph"
)

// Tensor is concrete data for one value: a dtype, a bound shape and bytes. Activations on
// the CPU are F32 (or I32 for ids); weights keep their checkpoint dtype. A quantized
// tensor (Q4/Q8) holds packed codes in Data (MLX layout: little-endian uint32 words,
// low bits first) and bf16 Scales and Biases, one of each per Group elements of the last
// dimension.
//
// Stride0, when non-zero, is the byte distance between consecutive slices along the first
// dimension of a stacked weight that is not contiguous in its checkpoint (the gate half of
// Hugging Face's fused experts.gate_up_proj [E, 2I, H]); Scales and Biases follow the same
// rule with Stride0Groups. Zero means contiguous.
//
// Data may be a read-only memory map: references never write to input tensors except the
// state argument of a StateUpdate op.
type Tensor struct {
	DType          graph.DType
	Shape          []int
	Group          int
	Data           []byte
	Scales, Biases []byte
	Stride0        int
	Stride0Groups  int
}

// NewTensor allocates a zeroed tensor of a non-quantized dtype.
func NewTensor(dt graph.DType, shape ...int) *Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return &Tensor{DType: dt, Shape: append([]int(nil), shape...), Data: make([]byte, n*dt.Bits()/8)}
}

// FromF32 wraps a float32 slice (copied) as an F32 tensor.
func FromF32(vals []float32, shape ...int) *Tensor {
	t := NewTensor(graph.F32, shape...)
	copy(t.F32(), vals)
	return t
}

// Elements is the product of the shape.
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// F32 views the data of an F32 tensor as []float32 without copying.
func (t *Tensor) F32() []float32 {
	if t.DType != graph.F32 {
		panic(fmt.Sprintf("ops: F32 view of a %s tensor", t.DType))
	}
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
}

// I32 views the data of an I32 tensor as []int32 without copying.
func (t *Tensor) I32() []int32 {
	if t.DType != graph.I32 {
		panic(fmt.Sprintf("ops: I32 view of a %s tensor", t.DType))
	}
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
}

// BF16ToF32 widens a bfloat16 bit pattern.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows with round-to-nearest-even (NaN stays NaN).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE half.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float reads element i of a dense tensor of any float dtype as float32.
func (t *Tensor) Float(i int) float32 {
	switch t.DType {
	case graph.F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	case graph.BF16:
		return BF16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
	case graph.F16:
		return F16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
	}
	panic(fmt.Sprintf("ops: Float of a %s tensor", t.DType))
}

// Row decodes row r of a 2-D (or stacked, flattened to rows) weight into dst as float32:
// dense float dtypes are widened, quantized ones dequantized (w = scale*q + bias). cols is
// the logical row length. This is the one place the CPU reads weights, so every weight
// format is handled here.
func (t *Tensor) Row(r, cols int, dst []float32) {
	if t.Stride0 != 0 {
		t.stridedRow(r, cols, dst)
		return
	}
	switch t.DType {
	case graph.Q4, graph.Q8:
		bits := t.DType.Bits()
		perWord := 32 / bits
		mask := uint32(1)<<bits - 1
		words := t.Data[r*cols*bits/8:]
		groups := cols / t.Group
		for g := 0; g < groups; g++ {
			gi := r*groups + g
			s := BF16ToF32(binary.LittleEndian.Uint16(t.Scales[2*gi:]))
			b := BF16ToF32(binary.LittleEndian.Uint16(t.Biases[2*gi:]))
			for c := g * t.Group; c < (g+1)*t.Group; c++ {
				w := binary.LittleEndian.Uint32(words[4*(c/perWord):])
				q := (w >> (uint(bits) * uint(c%perWord))) & mask
				dst[c] = s*float32(q) + b
			}
		}
	default:
		base := r * cols
		for c := 0; c < cols; c++ {
			dst[c] = t.Float(base + c)
		}
	}
}

// stridedRow resolves a row of a non-contiguous stacked weight to its slice, then decodes
// it as a contiguous one.
func (t *Tensor) stridedRow(r, cols int, dst []float32) {
	rowsPerSlice := 1
	for _, d := range t.Shape[1 : len(t.Shape)-1] {
		rowsPerSlice *= d
	}
	slice, within := r/rowsPerSlice, r%rowsPerSlice
	view := Tensor{DType: t.DType, Shape: t.Shape[1:], Group: t.Group, Data: t.Data[slice*t.Stride0:]}
	if t.DType.Quantized() {
		view.Scales = t.Scales[slice*t.Stride0Groups*2:]
		view.Biases = t.Biases[slice*t.Stride0Groups*2:]
	}
	view.Row(within, cols, dst)
}
