package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// MaxHeaderBytes bounds the JSON header (the reference implementation uses the same 100 MB
// limit). The real 35B-A3B shards have headers of a few hundred kilobytes.
const MaxHeaderBytes = 100 << 20

// TensorInfo is one header entry. Begin and End are byte offsets into the data section
// (which starts after the header), End exclusive.
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// Bytes is the tensor's size in the file.
func (t TensorInfo) Bytes() int64 { return t.End - t.Begin }

// Elements is the product of the shape.
func (t TensorInfo) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a validated safetensors header: every tensor's byte range lies inside the data
// section, the ranges tile it exactly, and each range's length equals the element count
// times the dtype size.
type Header struct {
	Metadata map[string]string
	// Tensors are in data order (by Begin).
	Tensors []TensorInfo
	index   map[string]int
}

// Lookup finds a tensor by name.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	i, ok := h.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// Names lists the tensors sorted by name.
func (h *Header) Names() []string {
	names := make([]string, 0, len(h.Tensors))
	for _, t := range h.Tensors {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

type rawEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// ParseHeader decodes the JSON header of a file whose data section is dataLen bytes long
// and validates it against that length. Allocation is bounded by len(js): nothing is sized
// from a number the header claims.
func ParseHeader(js []byte, dataLen int64) (*Header, error) {
	if len(js) > MaxHeaderBytes {
		return nil, fmt.Errorf("header is %d bytes, more than the %d-byte limit", len(js), MaxHeaderBytes)
	}
	if dataLen < 0 {
		return nil, fmt.Errorf("negative data length %d", dataLen)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	h := &Header{index: map[string]int{}}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header JSON: %w", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("header JSON: key is not a string")
		}
		if seen[name] {
			return nil, fmt.Errorf("header names %q twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, fmt.Errorf("__metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var e rawEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		t, err := checkEntry(name, e)
		if err != nil {
			return nil, err
		}
		h.index[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("header JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("header JSON: trailing data after the object")
	}
	if err := h.checkTiling(dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// checkEntry validates one tensor on its own: a known dtype, non-negative dims, two
// ordered offsets, and a byte length equal to elements times dtype size (overflow-checked).
func checkEntry(name string, e rawEntry) (TensorInfo, error) {
	dt, err := ParseDType(e.DType)
	if err != nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	if len(e.Offsets) != 2 {
		return TensorInfo{}, fmt.Errorf("tensor %q: data_offsets has %d entries, want 2", name, len(e.Offsets))
	}
	begin, end := e.Offsets[0], e.Offsets[1]
	if begin < 0 || end < begin {
		return TensorInfo{}, fmt.Errorf("tensor %q: bad data_offsets [%d, %d]", name, begin, end)
	}
	elems := int64(1)
	shape := make([]int, len(e.Shape))
	for i, d := range e.Shape {
		if d < 0 {
			return TensorInfo{}, fmt.Errorf("tensor %q: negative dimension %d in shape %v", name, d, e.Shape)
		}
		if d > 0 && elems > math.MaxInt64/int64(dt.Size())/d {
			return TensorInfo{}, fmt.Errorf("tensor %q: shape %v overflows", name, e.Shape)
		}
		elems *= d
		shape[i] = int(d)
	}
	if want := elems * int64(dt.Size()); end-begin != want {
		return TensorInfo{}, fmt.Errorf("tensor %q: %s %v needs %d bytes but data_offsets [%d, %d] span %d",
			name, dt, e.Shape, want, begin, end, end-begin)
	}
	return TensorInfo{Name: name, DType: dt, Shape: shape, Begin: begin, End: end}, nil
}

// checkTiling sorts the tensors by offset and requires the ranges to cover the data
// section exactly: no gap, no overlap, nothing past the end.
func (h *Header) checkTiling(dataLen int64) error {
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End // empty tensors first at a shared offset
	})
	var pos int64
	for i, t := range h.Tensors {
		h.index[t.Name] = i
		switch {
		case t.Begin < pos:
			return fmt.Errorf("tensor %q at [%d, %d] overlaps the previous tensor (ends at %d)", t.Name, t.Begin, t.End, pos)
		case t.Begin > pos:
			return fmt.Errorf("tensor %q starts at %d, leaving a gap after byte %d", t.Name, t.Begin, pos)
		case t.End > dataLen:
			return fmt.Errorf("truncated: tensor %q ends at data byte %d but the data section has only %d bytes", t.Name, t.End, dataLen)
		}
		pos = t.End
	}
	if pos != dataLen {
		return fmt.Errorf("data section has %d bytes but the tensors cover only %d", dataLen, pos)
	}
	return nil
}
