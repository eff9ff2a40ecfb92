package plan

import (
	"fmt"
	"math"
)

// ToEnd as a Range's End means "to the end of the buffer": the conservative range of an
// access whose extent depends on the step (a KV-cache append writes rows C..C+T-1 and
// attention reads rows 0..C+T-1 of a buffer whose size depends on N).
const ToEnd int64 = math.MaxInt64

// Overlaps reports whether two ranges share a byte.
func (r Range) Overlaps(o Range) bool {
	return r.Buffer == o.Buffer && r.Off < o.End && o.Off < r.End
}

// Bytes is the range's length (ToEnd ranges report -1: unknown until N is bound).
func (r Range) Bytes() int64 {
	if r.End == ToEnd {
		return -1
	}
	return r.End - r.Off
}

// Format prints the range with its buffer's name: arena[4096,12288), layers.3.k_cache[0,end).
func (r Range) Format(bufName string) string {
	if r.End == ToEnd {
		return fmt.Sprintf("%s[%d,end)", bufName, r.Off)
	}
	return fmt.Sprintf("%s[%d,%d)", bufName, r.Off, r.End)
}
