package graph

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseShape is the inverse of Shape.String: "[T,16,512]", "[]" (a scalar), "[8*T,2048]".
func ParseShape(s string) (Shape, error) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, fmt.Errorf("bad shape %q: want [d0,d1,...]", s)
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return Shape{}, nil
	}
	parts := strings.Split(body, ",")
	out := make(Shape, len(parts))
	for i, p := range parts {
		d, err := ParseDim(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("bad shape %q: %w", s, err)
		}
		out[i] = d
	}
	return out, nil
}

// ParseType is the inverse of Type.String: "f32[T,2048]", "q4g64[256,512,2048]",
// "(f32[T,4096],f32[32,128,128])".
func ParseType(s string) (Type, error) {
	t, rest, err := parseTypePrefix(s)
	if err != nil {
		return Type{}, err
	}
	if rest != "" {
		return Type{}, fmt.Errorf("bad type %q: trailing %q", s, rest)
	}
	return t, nil
}

// parseTypePrefix parses one type at the start of s and returns the unparsed remainder.
func parseTypePrefix(s string) (Type, string, error) {
	if strings.HasPrefix(s, "(") {
		var elems []Type
		rest := s[1:]
		for {
			e, r, err := parseTypePrefix(rest)
			if err != nil {
				return Type{}, "", err
			}
			elems = append(elems, e)
			switch {
			case strings.HasPrefix(r, ","):
				rest = r[1:]
			case strings.HasPrefix(r, ")"):
				return Tuple(elems...), r[1:], nil
			default:
				return Type{}, "", fmt.Errorf("bad tuple type %q: want , or ) after element", s)
			}
		}
	}
	open := strings.IndexByte(s, '[')
	close := strings.IndexByte(s, ']')
	if open <= 0 || close < open {
		return Type{}, "", fmt.Errorf("bad type %q: want dtype[shape]", s)
	}
	head := s[:open]
	shape, err := ParseShape(s[open : close+1])
	if err != nil {
		return Type{}, "", err
	}
	group := 0
	// Quantized types carry their group size: q4g64.
	if i := strings.IndexByte(head, 'g'); i > 0 && (head[0] == 'q') {
		g, err := strconv.Atoi(head[i+1:])
		if err != nil || g <= 0 {
			return Type{}, "", fmt.Errorf("bad type %q: bad group size", s)
		}
		group = g
		head = head[:i]
	}
	dt, err := ParseDType(head)
	if err != nil {
		return Type{}, "", fmt.Errorf("bad type %q: %w", s, err)
	}
	if dt.Quantized() && group == 0 {
		return Type{}, "", fmt.Errorf("bad type %q: quantized type needs a group size (q4g64)", s)
	}
	return Type{DType: dt, Shape: shape, Group: group}, s[close+1:], nil
}

// MarshalText writes the type in its text form, so plans and JSON dumps stay readable.
func (t Type) MarshalText() ([]byte, error) {
	if !t.IsTuple() && t.DType == InvalidDType && len(t.Shape) == 0 {
		return []byte{}, nil
	}
	return []byte(t.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (t *Type) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*t = Type{}
		return nil
	}
	pt, err := ParseType(string(b))
	if err != nil {
		return err
	}
	*t = pt
	return nil
}

// Substitute binds the symbol sym to n in every dimension of t (phase specialisation:
// T becomes 1 for decode). Other symbols stay symbolic.
func (t Type) Substitute(sym Sym, n int) Type {
	if t.IsTuple() {
		elems := make([]Type, len(t.Elems))
		for i, e := range t.Elems {
			elems[i] = e.Substitute(sym, n)
		}
		return Type{Elems: elems}
	}
	out := Type{DType: t.DType, Group: t.Group, Shape: t.Shape.Substitute(sym, n)}
	return out
}

// Substitute binds sym to n in every dimension.
func (s Shape) Substitute(sym Sym, n int) Shape {
	if s == nil {
		return nil
	}
	out := make(Shape, len(s))
	for i, d := range s {
		if !d.IsConst() && d.Sym == sym {
			d = D(d.Coef*n + d.Const)
		}
		out[i] = d
	}
	return out
}

// HasSym reports whether any dimension of t (or of its elements) uses sym.
func (t Type) HasSym(sym Sym) bool {
	for _, e := range t.Elems {
		if e.HasSym(sym) {
			return true
		}
	}
	for _, d := range t.Shape {
		if !d.IsConst() && d.Sym == sym {
			return true
		}
	}
	return false
}
