// Package graph is pistil's IR: a static, SSA-style op graph with dense value IDs,
// symbolic shapes and explicit state edges. It knows nothing of what ops mean; the op
// table (package ops) supplies that through the OpSet interface.
package graph

import (
	"fmt"
	"strconv"
	"strings"
)

// DType is the element type of a value. Q4 and Q8 are MLX affine-quantized weights
// (w = scale*q + bias, bf16 scale/bias per group of Type.Group elements along the last
// dimension); their Shape is the logical, dequantized shape.
type DType uint8

const (
	InvalidDType DType = iota
	F32
	BF16
	F16
	I32
	U32
	Q4
	Q8
)

var dtypeNames = [...]string{InvalidDType: "invalid", F32: "f32", BF16: "bf16", F16: "f16", I32: "i32", U32: "u32", Q4: "q4", Q8: "q8"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// ParseDType is the inverse of DType.String.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if n == s && i != int(InvalidDType) {
			return DType(i), nil
		}
	}
	return InvalidDType, fmt.Errorf("unknown dtype %q", s)
}

// Quantized reports whether d is an MLX affine-quantized weight type.
func (d DType) Quantized() bool { return d == Q4 || d == Q8 }

// Bits is the storage width of one element.
func (d DType) Bits() int {
	switch d {
	case F32, I32, U32:
		return 32
	case BF16, F16:
		return 16
	case Q4:
		return 4
	case Q8:
		return 8
	}
	return 0
}

// Sym is a symbolic dimension bound once per step or per session.
type Sym uint8

const (
	NoSym Sym = iota
	// SymT is the number of tokens in this step (1 in decode, the chunk size in prefill).
	SymT
	// SymC is the context length before this step (the position of the step's first token).
	SymC
	// SymN is the session's context capacity: the row count of KV-cache buffers.
	SymN
)

var symNames = [...]string{NoSym: "", SymT: "T", SymC: "C", SymN: "N"}

func (s Sym) String() string { return symNames[s] }

// Dim is Coef*Sym + Const. A constant dimension has Sym == NoSym and Coef == 0.
type Dim struct {
	Sym   Sym
	Coef  int
	Const int
}

// D is a constant dimension.
func D(n int) Dim { return Dim{Const: n} }

// T, C and N are the symbolic dimensions, coefficient 1.
var (
	T = Dim{Sym: SymT, Coef: 1}
	C = Dim{Sym: SymC, Coef: 1}
	N = Dim{Sym: SymN, Coef: 1}
)

// Times returns d scaled by k (e.g. T.Times(8) for T*8 routed rows).
func (d Dim) Times(k int) Dim { return Dim{Sym: d.Sym, Coef: d.Coef * k, Const: d.Const * k} }

// Plus returns d + k.
func (d Dim) Plus(k int) Dim { d.Const += k; return d }

// IsConst reports whether the dimension has no symbolic part.
func (d Dim) IsConst() bool { return d.Sym == NoSym || d.Coef == 0 }

// Eval binds the symbols.
func (d Dim) Eval(b Bindings) int {
	if d.IsConst() {
		return d.Const
	}
	return d.Coef*b.Get(d.Sym) + d.Const
}

func (d Dim) String() string {
	if d.IsConst() {
		return strconv.Itoa(d.Const)
	}
	var sb strings.Builder
	if d.Coef != 1 {
		sb.WriteString(strconv.Itoa(d.Coef))
		sb.WriteByte('*')
	}
	sb.WriteString(d.Sym.String())
	if d.Const > 0 {
		sb.WriteString("+" + strconv.Itoa(d.Const))
	} else if d.Const < 0 {
		sb.WriteString(strconv.Itoa(d.Const))
	}
	return sb.String()
}

// ParseDim parses "2048", "T", "8*T", "T+3", "2*N-1".
func ParseDim(s string) (Dim, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return D(n), nil
	}
	var d Dim
	rest := s
	if i := strings.IndexByte(rest, '*'); i >= 0 {
		k, err := strconv.Atoi(rest[:i])
		if err != nil {
			return Dim{}, fmt.Errorf("bad dimension %q", s)
		}
		d.Coef = k
		rest = rest[i+1:]
	} else {
		d.Coef = 1
	}
	if rest == "" {
		return Dim{}, fmt.Errorf("bad dimension %q", s)
	}
	sym, tail := rest[:1], rest[1:]
	switch sym {
	case "T":
		d.Sym = SymT
	case "C":
		d.Sym = SymC
	case "N":
		d.Sym = SymN
	default:
		return Dim{}, fmt.Errorf("bad dimension %q: unknown symbol %q", s, sym)
	}
	if tail != "" {
		k, err := strconv.Atoi(tail) // "+3" and "-1" both parse
		if err != nil {
			return Dim{}, fmt.Errorf("bad dimension %q", s)
		}
		d.Const = k
	}
	return d, nil
}

// Bindings gives the symbols their values for one step.
type Bindings struct{ T, C, N int }

// Get returns the value bound to s.
func (b Bindings) Get(s Sym) int {
	switch s {
	case SymT:
		return b.T
	case SymC:
		return b.C
	case SymN:
		return b.N
	}
	return 0
}

// Shape is a list of dimensions, outermost first (row-major).
type Shape []Dim

// S builds a constant shape.
func S(dims ...int) Shape {
	s := make(Shape, len(dims))
	for i, n := range dims {
		s[i] = D(n)
	}
	return s
}

// Eval binds the symbols of every dimension.
func (s Shape) Eval(b Bindings) []int {
	return s.EvalInto(b, make([]int, 0, len(s)))
}

// EvalInto is Eval appending to dst[:0], so a caller that evaluates the same shape again
// and again (a backend's operands, every step) can keep one slice.
func (s Shape) EvalInto(b Bindings, dst []int) []int {
	dst = dst[:0]
	for _, d := range s {
		dst = append(dst, d.Eval(b))
	}
	return dst
}

// Equal compares two shapes dimension by dimension.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Type is a value's element type and shape. Group is the quantization group size of Q4/Q8
// values (0 otherwise). A tuple type (Elems non-empty) is the result of an op with
// several outputs; Select extracts one element.
type Type struct {
	DType DType
	Shape Shape
	Group int
	Elems []Type
}

// TensorType builds a plain tensor type.
func TensorType(dt DType, shape ...Dim) Type { return Type{DType: dt, Shape: shape} }

// QuantType builds an MLX affine-quantized weight type.
func QuantType(dt DType, group int, shape ...Dim) Type {
	return Type{DType: dt, Shape: shape, Group: group}
}

// Tuple builds a tuple type.
func Tuple(elems ...Type) Type { return Type{Elems: elems} }

// IsTuple reports whether t has several elements.
func (t Type) IsTuple() bool { return len(t.Elems) > 0 }

// Equal compares types structurally.
func (t Type) Equal(o Type) bool {
	if t.DType != o.DType || t.Group != o.Group || !t.Shape.Equal(o.Shape) || len(t.Elems) != len(o.Elems) {
		return false
	}
	for i := range t.Elems {
		if !t.Elems[i].Equal(o.Elems[i]) {
			return false
		}
	}
	return true
}

// String prints "f32[T,2048]", "q4g64[256,512,2048]" or "(f32[T,4096],f32[32,128,128])".
func (t Type) String() string {
	if t.IsTuple() {
		parts := make([]string, len(t.Elems))
		for i, e := range t.Elems {
			parts[i] = e.String()
		}
		return "(" + strings.Join(parts, ",") + ")"
	}
	s := t.DType.String()
	if t.DType.Quantized() {
		s += "g" + strconv.Itoa(t.Group)
	}
	return s + t.Shape.String()
}

// Elements is the number of logical elements once symbols are bound.
func (t Type) Elements(b Bindings) int {
	n := 1
	for _, d := range t.Shape {
		n *= d.Eval(b)
	}
	return n
}

// Bytes is the storage size once symbols are bound. For quantized types it counts the
// packed codes plus the bf16 scale and bias of every group; for tuples, the sum.
func (t Type) Bytes(b Bindings) int64 {
	if t.IsTuple() {
		var sum int64
		for _, e := range t.Elems {
			sum += e.Bytes(b)
		}
		return sum
	}
	n := int64(t.Elements(b))
	if t.DType.Quantized() {
		groups := n / int64(t.Group)
		return n*int64(t.DType.Bits())/8 + groups*2*2
	}
	return n * int64(t.DType.Bits()) / 8
}
