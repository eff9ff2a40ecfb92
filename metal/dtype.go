package metal

import (
	"bytes"
	"reflect"
	"unsafe"
)

// argBytes is an args struct's memory as Go lays it out (the kernels' C layout is tested
// equal to Go's), with zeroed padding.
func argBytes(a any) []byte {
	v := reflect.ValueOf(a)
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return bytes.Clone(unsafe.Slice((*byte)(p.UnsafePointer()), v.Type().Size()))
}
