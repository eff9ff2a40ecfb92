package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// schema is a parsed JSON Schema node, reduced to what the grammar builder honours.
// Properties keep the order the schema wrote them in: the grammar emits them in that
// order, so a client's key order is the output's.
type schema struct {
	path string // JSON pointer of this node, for error messages

	// boolSchema: true (anything) or false (nothing), for the `true`/`false` schema forms.
	isBool, boolValue bool

	types []string // empty: any type the other keywords allow

	props      []property
	required   []string
	additional *schema // nil: no additional properties are generated
	allowExtra bool    // additionalProperties is not false (matters for required names not in properties)

	items              *schema
	minItems, maxItems int // maxItems -1: unbounded

	minLength, maxLength int // maxLength -1: unbounded
	format               string

	minimum, maximum *bound

	enum   [][]byte // compact JSON literals (const is an enum of one)
	anyOf  []*schema
	oneOf  bool // anyOf came from oneOf: branches must be disjoint
	ref    string
	hasRef bool
}

type property struct {
	name   string
	schema *schema
}

type bound struct {
	value     float64
	exclusive bool
}

// keywords the builder ignores because they do not constrain the value.
var annotationKeywords = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$anchor": true,
}

// supportedFormats are the string formats the grammar can generate exactly.
var supportedFormats = map[string]bool{"date": true, "time": true, "date-time": true, "email": true, "uuid": true, "ipv4": true}

// UnsupportedError names a schema keyword (or keyword value) the engine cannot honour.
type UnsupportedError struct {
	Path    string // JSON pointer of the schema node
	Keyword string
	Reason  string
}

func (e *UnsupportedError) Error() string {
	where := e.Path
	if where == "" {
		where = "#"
	}
	if e.Reason != "" {
		return fmt.Sprintf("unsupported JSON Schema keyword %q at %s: %s", e.Keyword, where, e.Reason)
	}
	return fmt.Sprintf("unsupported JSON Schema keyword %q at %s", e.Keyword, where)
}

// orderedObject is a JSON object with its keys in document order.
type orderedObject struct {
	keys   []string
	values map[string]json.RawMessage
}

func parseOrdered(raw json.RawMessage) (*orderedObject, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("expected an object")
	}
	o := &orderedObject{values: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := o.values[key]; !dup {
			o.keys = append(o.keys, key)
		}
		o.values[key] = v
	}
	return o, nil
}

type schemaParser struct {
	root   json.RawMessage
	parsed map[string]*schema // by pointer, for $ref targets
	depth  int
}

const maxSchemaDepth = 32

// parseSchema parses a whole schema document.
func parseSchema(doc []byte) (*schema, *schemaParser, error) {
	doc = bytes.TrimSpace(doc)
	if !json.Valid(doc) {
		return nil, nil, fmt.Errorf("the schema is not valid JSON")
	}
	p := &schemaParser{root: doc, parsed: map[string]*schema{}}
	s, err := p.parse(doc, "")
	if err != nil {
		return nil, nil, err
	}
	return s, p, nil
}

func (p *schemaParser) parse(raw json.RawMessage, path string) (*schema, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxSchemaDepth {
		return nil, &UnsupportedError{Path: path, Keyword: "nesting", Reason: fmt.Sprintf("schemas nested deeper than %d levels", maxSchemaDepth)}
	}
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true":
		return &schema{path: path, isBool: true, boolValue: true}, nil
	case "false":
		return &schema{path: path, isBool: true, boolValue: false}, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("schema at %s must be an object or a boolean", pointerOrRoot(path))
	}
	obj, err := parseOrdered(raw)
	if err != nil {
		return nil, fmt.Errorf("schema at %s: %v", pointerOrRoot(path), err)
	}
	s := &schema{path: path, maxItems: -1, maxLength: -1, allowExtra: true}
	for _, key := range obj.keys {
		v := obj.values[key]
		kp := path + "/" + escapePointer(key)
		switch key {
		case "type":
			if s.types, err = parseTypes(v, kp); err != nil {
				return nil, err
			}
		case "properties":
			props, err := parseOrdered(v)
			if err != nil {
				return nil, fmt.Errorf("%s must be an object", kp)
			}
			for _, name := range props.keys {
				sub, err := p.parse(props.values[name], kp+"/"+escapePointer(name))
				if err != nil {
					return nil, err
				}
				s.props = append(s.props, property{name: name, schema: sub})
			}
		case "required":
			if err := json.Unmarshal(v, &s.required); err != nil {
				return nil, fmt.Errorf("%s must be an array of strings", kp)
			}
		case "additionalProperties":
			t := strings.TrimSpace(string(v))
			switch t {
			case "false":
				s.allowExtra = false
			case "true":
			default:
				sub, err := p.parse(v, kp)
				if err != nil {
					return nil, err
				}
				s.additional = sub
			}
		case "items":
			if s.items, err = p.parse(v, kp); err != nil {
				return nil, err
			}
		case "minItems", "maxItems", "minLength", "maxLength":
			n, err := nonNegativeInt(v, kp)
			if err != nil {
				return nil, err
			}
			switch key {
			case "minItems":
				s.minItems = n
			case "maxItems":
				s.maxItems = n
			case "minLength":
				s.minLength = n
			case "maxLength":
				s.maxLength = n
			}
		case "format":
			if err := json.Unmarshal(v, &s.format); err != nil {
				return nil, fmt.Errorf("%s must be a string", kp)
			}
			if !supportedFormats[s.format] {
				return nil, &UnsupportedError{Path: path, Keyword: "format", Reason: fmt.Sprintf("format %q (supported: %s)", s.format, strings.Join(sortedKeys(supportedFormats), ", "))}
			}
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return nil, fmt.Errorf("%s must be a number", kp)
			}
			b := &bound{value: f, exclusive: strings.HasPrefix(key, "exclusive")}
			if strings.HasSuffix(key, "inimum") {
				s.minimum = tighterMin(s.minimum, b)
			} else {
				s.maximum = tighterMax(s.maximum, b)
			}
		case "enum":
			var vals []json.RawMessage
			if err := json.Unmarshal(v, &vals); err != nil || len(vals) == 0 {
				return nil, fmt.Errorf("%s must be a non-empty array", kp)
			}
			for _, val := range vals {
				s.enum = append(s.enum, compactJSON(val))
			}
		case "const":
			s.enum = [][]byte{compactJSON(v)}
		case "anyOf", "oneOf":
			var list []json.RawMessage
			if err := json.Unmarshal(v, &list); err != nil || len(list) == 0 {
				return nil, fmt.Errorf("%s must be a non-empty array of schemas", kp)
			}
			if s.anyOf != nil {
				return nil, &UnsupportedError{Path: path, Keyword: key, Reason: "anyOf and oneOf in one schema"}
			}
			for i, item := range list {
				sub, err := p.parse(item, fmt.Sprintf("%s/%d", kp, i))
				if err != nil {
					return nil, err
				}
				s.anyOf = append(s.anyOf, sub)
			}
			s.oneOf = key == "oneOf"
		case "$ref":
			if err := json.Unmarshal(v, &s.ref); err != nil {
				return nil, fmt.Errorf("%s must be a string", kp)
			}
			if s.ref != "#" && !strings.HasPrefix(s.ref, "#/") {
				return nil, &UnsupportedError{Path: path, Keyword: "$ref", Reason: fmt.Sprintf("only references inside the document (#/...) are supported, got %q", s.ref)}
			}
			s.hasRef = true
		case "$defs", "definitions":
			// parsed when referenced; check they are objects of schemas now so errors are early
			defs, err := parseOrdered(v)
			if err != nil {
				return nil, fmt.Errorf("%s must be an object of schemas", kp)
			}
			for _, name := range defs.keys {
				if _, err := p.parse(defs.values[name], kp+"/"+escapePointer(name)); err != nil {
					return nil, err
				}
			}
		default:
			if !annotationKeywords[key] {
				return nil, &UnsupportedError{Path: path, Keyword: key}
			}
		}
	}
	if s.hasRef && len(obj.keys) > 1 {
		for _, key := range obj.keys {
			if key != "$ref" && key != "$defs" && key != "definitions" && !annotationKeywords[key] {
				return nil, &UnsupportedError{Path: path, Keyword: key, Reason: "keywords beside $ref"}
			}
		}
	}
	if s.anyOf != nil && len(s.types)+len(s.props)+len(s.enum) > 0 {
		return nil, &UnsupportedError{Path: path, Keyword: "anyOf", Reason: "anyOf/oneOf together with type, properties or enum in one schema"}
	}
	if s.format != "" && (s.minLength > 0 || s.maxLength >= 0) {
		return nil, &UnsupportedError{Path: path, Keyword: "format", Reason: "format together with minLength/maxLength"}
	}
	if s.maxItems >= 0 && s.maxItems < s.minItems {
		return nil, fmt.Errorf("schema at %s: maxItems %d is below minItems %d", pointerOrRoot(path), s.maxItems, s.minItems)
	}
	if s.maxLength >= 0 && s.maxLength < s.minLength {
		return nil, fmt.Errorf("schema at %s: maxLength %d is below minLength %d", pointerOrRoot(path), s.maxLength, s.minLength)
	}
	return s, nil
}

// resolve returns the schema a $ref points to.
func (p *schemaParser) resolve(ref, from string) (*schema, error) {
	if s, ok := p.parsed[ref]; ok {
		return s, nil
	}
	raw := p.root
	if ref != "#" {
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			obj, err := parseOrdered(raw)
			if err != nil {
				return nil, fmt.Errorf("$ref %q at %s does not resolve", ref, pointerOrRoot(from))
			}
			v, ok := obj.values[part]
			if !ok {
				return nil, fmt.Errorf("$ref %q at %s does not resolve", ref, pointerOrRoot(from))
			}
			raw = v
		}
	}
	s, err := p.parse(raw, strings.TrimPrefix(ref, "#"))
	if err != nil {
		return nil, err
	}
	p.parsed[ref] = s
	return s, nil
}

var knownTypes = map[string]bool{"object": true, "array": true, "string": true, "integer": true, "number": true, "boolean": true, "null": true}

func parseTypes(v json.RawMessage, path string) ([]string, error) {
	var one string
	if json.Unmarshal(v, &one) == nil {
		if !knownTypes[one] {
			return nil, fmt.Errorf("%s: unknown type %q", path, one)
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(v, &list); err != nil || len(list) == 0 {
		return nil, fmt.Errorf("%s must be a type name or a non-empty array of them", path)
	}
	for _, t := range list {
		if !knownTypes[t] {
			return nil, fmt.Errorf("%s: unknown type %q", path, t)
		}
	}
	return list, nil
}

func nonNegativeInt(v json.RawMessage, path string) (int, error) {
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f < 0 || f != math.Trunc(f) || f > 1<<20 {
		return 0, fmt.Errorf("%s must be a non-negative integer (at most %d)", path, 1<<20)
	}
	return int(f), nil
}

func tighterMin(a, b *bound) *bound {
	if a == nil || b.value > a.value || (b.value == a.value && b.exclusive) {
		return b
	}
	return a
}

func tighterMax(a, b *bound) *bound {
	if a == nil || b.value < a.value || (b.value == a.value && b.exclusive) {
		return b
	}
	return a
}

func compactJSON(v json.RawMessage) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return bytes.TrimSpace(v)
	}
	return buf.Bytes()
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func pointerOrRoot(p string) string {
	if p == "" {
		return "#"
	}
	return "#" + p
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
