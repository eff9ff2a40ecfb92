package metal

import (
	"bytes"
	"fmt"
	"reflect"
	"unsafe"

	"pistil/graph"
	"pistil/ops/kernels"
)

// dtypeCode maps a graph dtype to the kernels' DT_* code.
func dtypeCode(dt graph.DType) (int32, error) {
	switch dt {
	case graph.F32:
		return kernels.DTF32, nil
	case graph.BF16:
		return kernels.DTBF16, nil
	case graph.F16:
		return kernels.DTF16, nil
	case graph.Q4:
		return kernels.DTQ4, nil
	case graph.Q8:
		return kernels.DTQ8, nil
	case graph.I32:
		return kernels.DTI32, nil
	}
	return 0, fmt.Errorf("dtype %s has no Metal kernel support", dt)
}

// argBytes is an args struct's memory as Go lays it out (the kernels' C layout is tested
// equal to Go's), with zeroed padding.
func argBytes(a any) []byte {
	v := reflect.ValueOf(a)
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return bytes.Clone(unsafe.Slice((*byte)(p.UnsafePointer()), v.Type().Size()))
}
