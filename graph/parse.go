package graph

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads the text format written by Print. Values may be numbered freely in
// hand-written text (each ID once, every arg defined on an earlier line); the result is
// renumbered densely in line order, so Print(Parse(Print(g))) == Print(g). Parse checks
// syntax and references only; graph.Check validates the ops.
func Parse(text string) (*Graph, error) {
	g := &Graph{}
	byID := map[int]*Value{}
	sawHeader := false
	for lineNo, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := func(err error) error { return fmt.Errorf("line %d: %w", lineNo+1, err) }
		switch {
		case strings.HasPrefix(line, "graph "):
			if sawHeader || len(g.Values) > 0 {
				return nil, where(fmt.Errorf("graph header must come first and once"))
			}
			name, rest, err := scanName(strings.TrimSpace(line[len("graph "):]))
			if err != nil || strings.TrimSpace(rest) != "" {
				return nil, where(fmt.Errorf("bad graph header %q", line))
			}
			g.Name = name
			sawHeader = true
		case strings.HasPrefix(line, "output "):
			rest := strings.TrimSpace(line[len("output "):])
			name, rest, err := scanName(rest)
			if err != nil {
				return nil, where(err)
			}
			rest = strings.TrimSpace(rest)
			if !strings.HasPrefix(rest, "=") {
				return nil, where(fmt.Errorf("bad output line %q: want output NAME = vID", line))
			}
			id, err := parseRef(strings.TrimSpace(rest[1:]))
			if err != nil {
				return nil, where(err)
			}
			v, ok := byID[id]
			if !ok {
				return nil, where(fmt.Errorf("output %s refers to undefined v%d", name, id))
			}
			g.Outputs = append(g.Outputs, Output{Name: name, Value: v})
		default:
			if len(g.Outputs) > 0 {
				return nil, where(fmt.Errorf("value after the outputs: outputs are listed at the end"))
			}
			v, id, err := parseValueLine(line, byID)
			if err != nil {
				return nil, where(err)
			}
			if _, dup := byID[id]; dup {
				return nil, where(fmt.Errorf("v%d defined twice", id))
			}
			byID[id] = v
			g.Values = append(g.Values, v)
		}
	}
	g.Renumber()
	return g, nil
}

func parseRef(s string) (int, error) {
	if len(s) < 2 || s[0] != 'v' {
		return 0, fmt.Errorf("bad value reference %q: want vN", s)
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad value reference %q: want vN", s)
	}
	return n, nil
}

// parseValueLine reads `vID = op <type> [{attrs}] [args...] [@name]`.
func parseValueLine(line string, byID map[int]*Value) (*Value, int, error) {
	eq := strings.Index(line, " = ")
	if eq < 0 {
		return nil, 0, fmt.Errorf("bad value line %q: want vN = op <type> ...", line)
	}
	id, err := parseRef(line[:eq])
	if err != nil {
		return nil, 0, err
	}
	rest := strings.TrimSpace(line[eq+3:])
	sp := strings.IndexByte(rest, ' ')
	if sp <= 0 {
		return nil, 0, fmt.Errorf("v%d: missing type after op", id)
	}
	v := &Value{ID: ID(id), Op: rest[:sp]}
	rest = strings.TrimSpace(rest[sp+1:])
	if !strings.HasPrefix(rest, "<") {
		return nil, 0, fmt.Errorf("v%d: want <type> after op %s", id, v.Op)
	}
	end := strings.IndexByte(rest, '>')
	if end < 0 {
		return nil, 0, fmt.Errorf("v%d: unterminated type", id)
	}
	if v.Type, err = ParseType(rest[1:end]); err != nil {
		return nil, 0, fmt.Errorf("v%d: %w", id, err)
	}
	rest = strings.TrimSpace(rest[end+1:])
	if strings.HasPrefix(rest, "{") {
		body, after, err := scanBraces(rest)
		if err != nil {
			return nil, 0, fmt.Errorf("v%d: %w", id, err)
		}
		if v.Attrs, err = parseAttrs(body); err != nil {
			return nil, 0, fmt.Errorf("v%d: %w", id, err)
		}
		rest = strings.TrimSpace(after)
	}
	for rest != "" {
		if strings.HasPrefix(rest, "@") {
			name, after, err := scanName(rest[1:])
			if err != nil {
				return nil, 0, fmt.Errorf("v%d: %w", id, err)
			}
			if strings.TrimSpace(after) != "" {
				return nil, 0, fmt.Errorf("v%d: text after the name: %q", id, after)
			}
			v.Name = name
			break
		}
		word := rest
		if sp := strings.IndexByte(rest, ' '); sp >= 0 {
			word, rest = rest[:sp], strings.TrimSpace(rest[sp+1:])
		} else {
			rest = ""
		}
		ref, err := parseRef(word)
		if err != nil {
			return nil, 0, fmt.Errorf("v%d: %w", id, err)
		}
		a, ok := byID[ref]
		if !ok {
			return nil, 0, fmt.Errorf("v%d: argument v%d is not defined on an earlier line", id, ref)
		}
		v.Args = append(v.Args, a)
	}
	return v, id, nil
}

// scanBraces splits "{...} rest" at the matching brace, skipping quoted strings.
func scanBraces(s string) (body, rest string, err error) {
	inQuote := false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return s[1:i], s[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("unterminated attrs %q", s)
}

// parseAttrs reads "k=v, k2=v2" (the inside of the braces).
func parseAttrs(body string) (Attrs, error) {
	attrs := Attrs{}
	var parts []string
	depth, inQuote, start := 0, false, 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case inQuote:
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, body[start:i])
			start = i + 1
		}
	}
	if inQuote || depth != 0 {
		return nil, fmt.Errorf("unbalanced attrs {%s}", body)
	}
	if strings.TrimSpace(body) != "" {
		parts = append(parts, body[start:])
	}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		eq := strings.IndexByte(p, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("bad attr %q: want key=value", p)
		}
		key := strings.TrimSpace(p[:eq])
		if _, dup := attrs[key]; dup {
			return nil, fmt.Errorf("attr %s given twice", key)
		}
		val, err := ParseAttr(strings.TrimSpace(p[eq+1:]))
		if err != nil {
			return nil, fmt.Errorf("attr %s: %w", key, err)
		}
		attrs[key] = val
	}
	return attrs, nil
}

// scanName reads a bare or Go-quoted name at the start of s.
func scanName(s string) (name, rest string, err error) {
	if strings.HasPrefix(s, `"`) {
		for i := 1; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if s[i] == '"' {
				name, err := strconv.Unquote(s[:i+1])
				if err != nil {
					return "", "", fmt.Errorf("bad quoted name %s: %w", s[:i+1], err)
				}
				return name, s[i+1:], nil
			}
		}
		return "", "", fmt.Errorf("unterminated quoted name %s", s)
	}
	i := 0
	for i < len(s) && bareNameChar(s[i]) {
		i++
	}
	if i == 0 {
		return "", "", fmt.Errorf("missing name at %q", s)
	}
	return s[:i], s[i:], nil
}
