// Package safetensors reads and writes the safetensors format: an 8-byte little-endian
// header length, a JSON header naming every tensor's dtype, shape and byte range, then the
// raw data. Files are read through a read-only memory map so a checkpoint larger than RAM
// opens without being loaded; the header is validated completely before any byte of data
// is trusted, so a truncated file or a lying header is an error naming the file, never a
// panic or a huge allocation.
package safetensors

import "fmt"

// DType is an element type as the header spells it. Every dtype of the format parses, so
// a checkpoint carrying tensors pistil never reads (a vision tower in F64, say) still
// opens; Supported says which ones pistil can compute with.
type DType uint8

const (
	InvalidDType DType = iota
	BOOL
	U8
	I8
	F8E4M3
	F8E5M2
	I16
	U16
	F16
	BF16
	I32
	U32
	F32
	F64
	I64
	U64
)

var dtypes = [...]struct {
	name      string
	size      int
	supported bool
}{
	InvalidDType: {"invalid", 0, false},
	BOOL:         {"BOOL", 1, false},
	U8:           {"U8", 1, false},
	I8:           {"I8", 1, false},
	F8E4M3:       {"F8_E4M3", 1, false},
	F8E5M2:       {"F8_E5M2", 1, false},
	I16:          {"I16", 2, false},
	U16:          {"U16", 2, false},
	F16:          {"F16", 2, true},
	BF16:         {"BF16", 2, true},
	I32:          {"I32", 4, true},
	U32:          {"U32", 4, true},
	F32:          {"F32", 4, true},
	F64:          {"F64", 8, false},
	I64:          {"I64", 8, false},
	U64:          {"U64", 8, false},
}

// ParseDType maps a header dtype string to a DType.
func ParseDType(s string) (DType, error) {
	for i, d := range dtypes {
		if d.name == s && DType(i) != InvalidDType {
			return DType(i), nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q", s)
}

func (d DType) String() string {
	if int(d) < len(dtypes) {
		return dtypes[d].name
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the byte width of one element.
func (d DType) Size() int {
	if int(d) < len(dtypes) {
		return dtypes[d].size
	}
	return 0
}

// Supported reports whether pistil computes with this dtype (BF16, F16, F32, U32, I32).
func (d DType) Supported() bool { return int(d) < len(dtypes) && dtypes[d].supported }
