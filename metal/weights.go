package metal

import (
	"fmt"

	"pistil/ops"
)

// packed is a weight's bytes as the kernels read them: contiguous data, then (quantized)
// one bf16 scale and bias per group. A tensor that is a strided view (Stride0: a stack
// made of slices of a larger tensor, by a named checkpoint transform) is packed into
// fresh memory; a contiguous one is returned as its own bytes, which for an mmap'd
// checkpoint lie in the mapping (a no-copy view can cover them).
func packed(t *ops.Tensor) (data, scales, biases []byte, err error) {
	elems := int64(t.Elements())
	dataBytes := elems * int64(t.DType.Bits()) / 8
	groups := int64(0)
	if t.DType.Quantized() {
		if t.Group <= 0 || t.Group%8 != 0 {
			return nil, nil, nil, fmt.Errorf("quantization group %d is not a positive multiple of 8", t.Group)
		}
		groups = elems / int64(t.Group)
	}
	data, scales, biases = t.Data, t.Scales, t.Biases
	if t.Stride0 != 0 && len(t.Shape) > 0 && t.Shape[0] > 0 {
		n := int64(t.Shape[0])
		data = packSlices(t.Data, n, dataBytes/n, int64(t.Stride0))
		if groups > 0 {
			scales = packSlices(t.Scales, n, 2*groups/n, 2*int64(t.Stride0Groups))
			biases = packSlices(t.Biases, n, 2*groups/n, 2*int64(t.Stride0Groups))
		}
	}
	if int64(len(data)) < dataBytes {
		return nil, nil, nil, fmt.Errorf("%d bytes of data, its shape %v needs %d", len(data), t.Shape, dataBytes)
	}
	if groups > 0 && (int64(len(scales)) < 2*groups || int64(len(biases)) < 2*groups) {
		return nil, nil, nil, fmt.Errorf("%d/%d bytes of scales/biases, want %d", len(scales), len(biases), 2*groups)
	}
	return data[:dataBytes], scales[:2*groups], biases[:2*groups], nil
}

// packSlices copies n slices of size bytes, stride apart, into one contiguous buffer.
func packSlices(src []byte, n, size, stride int64) []byte {
	out := make([]byte, n*size)
	for i := int64(0); i < n; i++ {
		copy(out[i*size:(i+1)*size], src[i*stride:i*stride+size])
	}
	return out
}
