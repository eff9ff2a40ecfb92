package graph

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The text format, one value per line, outputs at the end:
//
//	graph qwen35moe
//	v0 = input <i32[T]> @tokens
//	v1 = weight <q4g64[248320,2048]> @embed_tokens
//	v2 = embed <f32[T,2048]> v1 v0
//	v41 = rms_norm <f32[T,2048]> {eps=1e-06} v40 v12
//	v57 = conv1d <(f32[T,8192],bf16[3,8192])> v55 v56 v20
//	output logits = v900
//
// A value line is `vID = op <type> [{attrs}] [args...] [@name]`. Attrs are sorted by key;
// integers print bare, floats always show a '.' or an exponent (so 2.0 stays a float),
// strings are Go-quoted, lists are [1,2]. The name (the binding of weight, state and input
// values, a debug label otherwise) prints bare when it is made of letters, digits and
// `_.-/:`, else Go-quoted. Lines starting with '#' and blank lines are ignored.

// Print writes g in the text format.
func Print(g *Graph) string {
	var sb strings.Builder
	sb.Grow(64 * (len(g.Values) + len(g.Outputs) + 1))
	sb.WriteString("graph ")
	sb.WriteString(printName(g.Name))
	sb.WriteByte('\n')
	for _, v := range g.Values {
		sb.WriteString(FormatValue(v))
		sb.WriteByte('\n')
	}
	for _, o := range g.Outputs {
		ref := "<nil>"
		if o.Value != nil {
			ref = o.Value.Ref()
		}
		fmt.Fprintf(&sb, "output %s = %s\n", printName(o.Name), ref)
	}
	return sb.String()
}

// FormatValue is one value's line of the text format.
func FormatValue(v *Value) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s = %s <%s>", v.Ref(), v.Op, v.Type)
	if len(v.Attrs) > 0 {
		sb.WriteString(" ")
		sb.WriteString(FormatAttrs(v.Attrs))
	}
	for _, a := range v.Args {
		sb.WriteByte(' ')
		if a == nil {
			sb.WriteString("<nil>")
		} else {
			sb.WriteString(a.Ref())
		}
	}
	if v.Name != "" {
		sb.WriteString(" @")
		sb.WriteString(printName(v.Name))
	}
	return sb.String()
}

// FormatAttrs prints attrs as {k=v, ...} sorted by key.
func FormatAttrs(a Attrs) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, k := range a.Keys() {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(k)
		sb.WriteByte('=')
		sb.WriteString(FormatAttr(a[k]))
	}
	sb.WriteByte('}')
	return sb.String()
}

// FormatAttr prints one attribute value; ParseAttr reads it back with the same Go type
// (int kinds become int64, float32 becomes float64).
func FormatAttr(x any) string {
	switch x := x.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case float64:
		return formatFloat(x)
	case float32:
		return formatFloat(float64(x))
	case string:
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case []int64:
		parts := make([]string, len(x))
		for i, n := range x {
			parts[i] = strconv.FormatInt(n, 10)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case []int:
		parts := make([]string, len(x))
		for i, n := range x {
			parts[i] = strconv.Itoa(n)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("?%T", x)
}

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// ValidAttr reports whether x is an attribute value the text format can carry.
func ValidAttr(x any) bool {
	switch x.(type) {
	case int64, int, int32, float64, float32, string, bool, []int64, []int:
		return true
	}
	return false
}

// ParseAttr reads one attribute value written by FormatAttr.
func ParseAttr(s string) (any, error) {
	switch {
	case s == "true":
		return true, nil
	case s == "false":
		return false, nil
	case strings.HasPrefix(s, `"`):
		str, err := strconv.Unquote(s)
		if err != nil {
			return nil, fmt.Errorf("bad string attribute %s: %w", s, err)
		}
		return str, nil
	case strings.HasPrefix(s, "["):
		if !strings.HasSuffix(s, "]") {
			return nil, fmt.Errorf("bad list attribute %s", s)
		}
		body := s[1 : len(s)-1]
		out := []int64{}
		if body == "" {
			return out, nil
		}
		for _, p := range strings.Split(body, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bad list attribute %s: %w", s, err)
			}
			out = append(out, n)
		}
		return out, nil
	case s == "+Inf" || s == "-Inf" || s == "NaN" || strings.ContainsAny(s, ".eE"):
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("bad float attribute %s: %w", s, err)
		}
		return f, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad attribute value %s", s)
	}
	return n, nil
}

func bareNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '-' || c == '/' || c == ':'
}

func printName(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if !bareNameChar(s[i]) {
			return strconv.Quote(s)
		}
	}
	return s
}
