package kernels

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// GroupMemory is the group (threadgroup, shared) memory one kernel declares.
type GroupMemory struct {
	Kernel string
	// Bytes is the sum of the TG_MEM declarations; Padded rounds each up to 16 bytes, a
	// bound on what a compiler that aligns every variable allocates.
	Bytes, Padded int
}

// GroupMemoryOf computes, from the kernel sources with a backend's tuning, the group
// memory every kernel declares (sorted by kernel name). It reads the TG_MEM declarations
// after evaluating the .k files' #define / #if lines, so a tile size that changes per
// backend is counted as that backend compiles it.
func GroupMemoryOf(t Tuning) ([]GroupMemory, error) {
	src, err := preprocess(TuningDecls(t) + CDecls() + Dialect() + ProbeSource())
	if err != nil {
		return nil, err
	}
	var out []GroupMemory
	for _, k := range kernelBodies(src.text) {
		gm := GroupMemory{Kernel: k.name}
		for _, decl := range tgDecl.FindAllStringSubmatchIndex(k.body, -1) {
			typ, count := k.body[decl[2]:decl[3]], 1
			size, ok := dialectSizes[typ]
			if !ok {
				return nil, fmt.Errorf("%s: TG_MEM of type %s, whose size is not known", k.name, typ)
			}
			if decl[6] >= 0 {
				n, err := src.eval(k.body[decl[6]:decl[7]])
				if err != nil {
					return nil, fmt.Errorf("%s: TG_MEM %s: %w", k.name, k.body[decl[4]:decl[5]], err)
				}
				count = int(n)
			}
			gm.Bytes += size * count
			gm.Padded += (size*count + 15) / 16 * 16
		}
		if n, m := strings.Count(k.body, "TG_MEM"), len(tgDecl.FindAllStringIndex(k.body, -1)); n != m {
			return nil, fmt.Errorf("%s: %d TG_MEM declarations, %d of the form TG_MEM type name[count];", k.name, n, m)
		}
		out = append(out, gm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kernel < out[j].Kernel })
	return out, nil
}

var (
	tgDecl       = regexp.MustCompile(`TG_MEM\s+([a-z0-9_]+)\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[([^\]]+)\])?\s*;`)
	kernelDecl   = regexp.MustCompile(`KERNEL(?:_BOUNDED|_EARLY)?\(([a-z0-9_]+),`)
	dialectSizes = map[string]int{"vec4u": 16, "f32": 4, "i32": 4, "u32": 4, "u64": 8, "i64": 8, "u16": 2, "u8": 1}
)

type kernelBody struct{ name, body string }

// kernelBodies finds each KERNEL declaration and its brace-matched body.
func kernelBodies(src string) []kernelBody {
	var out []kernelBody
	for _, m := range kernelDecl.FindAllStringSubmatchIndex(src, -1) {
		open := strings.IndexByte(src[m[1]:], '{')
		if open < 0 {
			continue
		}
		start, depth := m[1]+open, 0
		end := start
		for i := start; i < len(src); i++ {
			if src[i] == '{' {
				depth++
			} else if src[i] == '}' {
				if depth--; depth == 0 {
					end = i
					break
				}
			}
		}
		out = append(out, kernelBody{src[m[2]:m[3]], src[start : end+1]})
	}
	return out
}

// macros is the object-like #defines of a source, evaluable as integer expressions.
type macros struct {
	defs map[string]string
	text string // the source with inactive #if branches and all directives removed
}

// preprocess keeps the lines of active #if/#ifdef/#ifndef/#else branches and records the
// object-like #defines; function-like macros are skipped (no kernel sizes use them).
func preprocess(src string) (*macros, error) {
	m := &macros{defs: map[string]string{}}
	var b strings.Builder
	type cond struct{ active, parent bool }
	var stack []cond
	active := true
	for n, line := range strings.Split(src, "\n") {
		l := strings.TrimSpace(line)
		if i := strings.Index(l, "//"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if !strings.HasPrefix(l, "#") {
			if active {
				b.WriteString(line + "\n")
			} else {
				b.WriteString("\n")
			}
			continue
		}
		b.WriteString("\n")
		dir, rest, _ := strings.Cut(strings.TrimSpace(l[1:]), " ")
		rest = strings.TrimSpace(rest)
		switch dir {
		case "define":
			if !active {
				continue
			}
			name, val, _ := strings.Cut(rest, " ")
			if strings.Contains(name, "(") {
				continue
			}
			m.defs[name] = strings.TrimSpace(val)
		case "if", "ifdef", "ifndef":
			var on bool
			switch dir {
			case "ifdef":
				_, on = m.defs[rest]
			case "ifndef":
				_, on = m.defs[rest]
				on = !on
			default:
				v, err := m.eval(rest)
				if err != nil && active {
					return nil, fmt.Errorf("line %d: #if %s: %w", n+1, rest, err)
				}
				on = v != 0
			}
			stack = append(stack, cond{on, active})
			active = active && on
		case "else":
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: #else without #if", n+1)
			}
			top := &stack[len(stack)-1]
			top.active = !top.active
			active = top.parent && top.active
		case "endif":
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: #endif without #if", n+1)
			}
			active = stack[len(stack)-1].parent
			stack = stack[:len(stack)-1]
		case "undef", "pragma", "include", "error":
		default:
			return nil, fmt.Errorf("line %d: directive #%s is not understood", n+1, dir)
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("%d #if without #endif", len(stack))
	}
	m.text = b.String()
	return m, nil
}

// eval evaluates an integer expression of literals, defined names, + - * / % ! and
// parentheses.
func (m *macros) eval(expr string) (int64, error) {
	p := &exprParser{m: m, depth: 0}
	p.toks = exprToken.FindAllString(expr, -1)
	if strings.Join(p.toks, "") != strings.ReplaceAll(strings.ReplaceAll(expr, " ", ""), "\t", "") {
		return 0, fmt.Errorf("expression %q has characters the evaluator does not know", expr)
	}
	v, err := p.sum()
	if err == nil && p.pos != len(p.toks) {
		err = fmt.Errorf("expression %q: unexpected %q", expr, p.toks[p.pos])
	}
	return v, err
}

var exprToken = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*|[0-9]+[uU]?|[-+*/%()!]`)

type exprParser struct {
	m     *macros
	toks  []string
	pos   int
	depth int
}

func (p *exprParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *exprParser) sum() (int64, error) {
	v, err := p.product()
	for err == nil && (p.peek() == "+" || p.peek() == "-") {
		op := p.toks[p.pos]
		p.pos++
		var r int64
		if r, err = p.product(); op == "+" {
			v += r
		} else {
			v -= r
		}
	}
	return v, err
}

func (p *exprParser) product() (int64, error) {
	v, err := p.unary()
	for err == nil && (p.peek() == "*" || p.peek() == "/" || p.peek() == "%") {
		op := p.toks[p.pos]
		p.pos++
		var r int64
		if r, err = p.unary(); err != nil {
			break
		}
		switch {
		case op == "*":
			v *= r
		case r == 0:
			return 0, fmt.Errorf("division by zero")
		case op == "/":
			v /= r
		default:
			v %= r
		}
	}
	return v, err
}

func (p *exprParser) unary() (int64, error) {
	switch t := p.peek(); {
	case t == "":
		return 0, fmt.Errorf("expression ends early")
	case t == "-" || t == "!":
		p.pos++
		v, err := p.unary()
		if t == "-" {
			return -v, err
		}
		if v == 0 {
			return 1, err
		}
		return 0, err
	case t == "(":
		p.pos++
		v, err := p.sum()
		if err == nil && p.peek() != ")" {
			err = fmt.Errorf("missing )")
		}
		p.pos++
		return v, err
	case t[0] >= '0' && t[0] <= '9':
		p.pos++
		return strconv.ParseInt(strings.TrimRight(t, "uU"), 10, 64)
	default:
		p.pos++
		def, ok := p.m.defs[t]
		if !ok {
			return 0, fmt.Errorf("%s is not a defined constant", t)
		}
		if p.depth > 32 {
			return 0, fmt.Errorf("%s: macros nest too deep", t)
		}
		sub := &exprParser{m: p.m, toks: exprToken.FindAllString(def, -1), depth: p.depth + 1}
		v, err := sub.sum()
		if err == nil && sub.pos != len(sub.toks) {
			err = fmt.Errorf("%s = %q is not an integer expression", t, def)
		}
		return v, err
	}
}
