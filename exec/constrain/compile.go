package constrain

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// compiler turns a parsed schema into grammar fragments. Fragments are built eagerly (every
// $ref is expanded here, up to maxRefDepth times along one path), and a value that cannot
// be produced within those limits is a nil fragment, which the containers around it drop
// (an optional property, an array that may be empty, an anyOf branch) or propagate.
type compiler struct {
	p        *schemaParser
	active   map[string]int
	mode     uint8 // modeJSON, or modeJSONTool inside tool-call arguments
	anyDepth int
}

const (
	// maxRefDepth is how many times one $ref may expand inside itself (recursive schemas).
	maxRefDepth = 3
	// maxAnyDepth is how deep free-form JSON (a schema of {}, json_object) may nest.
	maxAnyDepth = 3
	// numberCap bounds the magnitude of generated numbers (15 digits, exact in float64).
	numberCap  = 999_999_999_999_999
	fracDigits = 6
)

var ws = opt(lit(" "))

func (c *compiler) value(s *schema) (frag, error) {
	if s.isBool {
		if !s.boolValue {
			return nil, nil
		}
		return c.anyValue(), nil
	}
	if s.hasRef {
		if c.active[s.ref] >= maxRefDepth {
			return nil, nil
		}
		target, err := c.p.resolve(s.ref, s.path)
		if err != nil {
			return nil, err
		}
		c.active[s.ref]++
		defer func() { c.active[s.ref]-- }()
		return c.value(target)
	}
	if s.anyOf != nil {
		if s.oneOf {
			if err := c.checkDisjoint(s); err != nil {
				return nil, err
			}
		}
		var fs []frag
		for _, br := range s.anyOf {
			f, err := c.value(br)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fs = append(fs, f)
			}
		}
		if len(fs) == 0 {
			return nil, nil
		}
		return alt(fs...), nil
	}
	if s.enum != nil {
		var fs []frag
		for _, v := range s.enum {
			if len(s.types) == 0 || typeAdmits(s.types, v) {
				fs = append(fs, lit(string(v)))
			}
		}
		if len(fs) == 0 {
			return nil, nil
		}
		return alt(fs...), nil
	}
	types := s.types
	if len(types) == 0 {
		types = impliedTypes(s)
		if len(types) == 0 {
			return c.anyValue(), nil
		}
	}
	var fs []frag
	hasNumber := false
	for _, t := range types {
		hasNumber = hasNumber || t == "number"
	}
	for _, t := range types {
		var f frag
		var err error
		switch t {
		case "object":
			f, err = c.object(s)
		case "array":
			f, err = c.array(s)
		case "string":
			f = c.stringValue(s)
		case "integer":
			if hasNumber {
				continue // number covers it
			}
			f, err = integerFrag(s)
		case "number":
			f, err = numberFrag(s)
		case "boolean":
			f = alt(lit("true"), lit("false"))
		case "null":
			f = lit("null")
		}
		if err != nil {
			return nil, err
		}
		if f != nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil, nil
	}
	return alt(fs...), nil
}

// impliedTypes guesses the type of a schema without "type" from its keywords.
func impliedTypes(s *schema) []string {
	switch {
	case len(s.props) > 0 || len(s.required) > 0 || s.additional != nil || !s.allowExtra:
		return []string{"object"}
	case s.items != nil || s.minItems > 0 || s.maxItems >= 0:
		return []string{"array"}
	case s.minLength > 0 || s.maxLength >= 0 || s.format != "":
		return []string{"string"}
	case s.minimum != nil || s.maximum != nil:
		return []string{"number"}
	}
	return nil
}

func typeAdmits(types []string, lit []byte) bool {
	kind := literalKind(lit)
	for _, t := range types {
		if t == kind || (t == "number" && kind == "integer") {
			return true
		}
	}
	return false
}

func literalKind(v []byte) string {
	switch {
	case len(v) == 0:
		return ""
	case v[0] == '"':
		return "string"
	case v[0] == '{':
		return "object"
	case v[0] == '[':
		return "array"
	case v[0] == 't' || v[0] == 'f':
		return "boolean"
	case v[0] == 'n':
		return "null"
	}
	if f, err := strconv.ParseFloat(string(v), 64); err == nil && f == math.Trunc(f) && !strings.ContainsAny(string(v), ".eE") {
		return "integer"
	}
	return "number"
}

// checkDisjoint accepts a oneOf only when no value can match two branches, judged by the
// kinds of value each branch produces (integer overlaps number; free-form overlaps all).
func (c *compiler) checkDisjoint(s *schema) error {
	seen := map[string]int{}
	literals := map[string]int{}
	for i, br := range s.anyOf {
		kinds, lits := branchKinds(br)
		for _, k := range kinds {
			for _, clash := range overlapping(k) {
				if j, ok := seen[clash]; ok && j != i {
					return &UnsupportedError{Path: s.path, Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d can match the same value; use anyOf, or branches of different types", j, i)}
				}
			}
		}
		for _, l := range lits {
			if j, ok := literals[l]; ok && j != i {
				return &UnsupportedError{Path: s.path, Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d share the value %s", j, i, l)}
			}
			if j, ok := seen[literalKind([]byte(l))]; ok && j != i {
				return &UnsupportedError{Path: s.path, Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d can match the same value", j, i)}
			}
		}
		for _, k := range kinds {
			seen[k] = i
		}
		for _, l := range lits {
			literals[l] = i
			if j, ok := seen[literalKind([]byte(l))]; ok && j != i {
				return &UnsupportedError{Path: s.path, Keyword: "oneOf", Reason: fmt.Sprintf("branches %d and %d can match the same value", j, i)}
			}
		}
	}
	return nil
}

func overlapping(kind string) []string {
	switch kind {
	case "integer":
		return []string{"integer", "number", "any"}
	case "number":
		return []string{"integer", "number", "any"}
	case "any":
		return []string{"object", "array", "string", "integer", "number", "boolean", "null", "any"}
	}
	return []string{kind, "any"}
}

// branchKinds is what a oneOf branch produces: whole kinds, or literal values (enum).
func branchKinds(s *schema) (kinds []string, literals []string) {
	switch {
	case s.isBool:
		if s.boolValue {
			return []string{"any"}, nil
		}
		return nil, nil
	case s.hasRef || s.anyOf != nil:
		return []string{"any"}, nil
	case s.enum != nil:
		for _, v := range s.enum {
			literals = append(literals, string(v))
		}
		return nil, literals
	}
	types := s.types
	if len(types) == 0 {
		types = impliedTypes(s)
	}
	if len(types) == 0 {
		return []string{"any"}, nil
	}
	return types, nil
}

func (c *compiler) anyValue() frag {
	if c.anyDepth >= maxAnyDepth {
		return alt(c.freeString(), numberAll(), lit("true"), lit("false"), lit("null"))
	}
	c.anyDepth++
	defer func() { c.anyDepth-- }()
	inner := c.anyValue()
	obj := objectFrag(nil, seq(c.freeString(), lit(":"), ws, inner))
	arr := arrayFrag(inner, 0, -1)
	return alt(obj, arr, c.freeString(), numberAll(), lit("true"), lit("false"), lit("null"))
}

func (c *compiler) freeString() frag {
	return seq(lit(`"`), str(strSpec{min: 0, max: -1, mode: c.mode}))
}

type kv struct {
	key      string
	value    frag
	required bool
}

func (c *compiler) object(s *schema) (frag, error) {
	required := map[string]bool{}
	for _, r := range s.required {
		required[r] = true
	}
	var entries []kv
	declared := map[string]bool{}
	for _, p := range s.props {
		declared[p.name] = true
		f, err := c.value(p.schema)
		if err != nil {
			return nil, err
		}
		if f == nil {
			if required[p.name] {
				return nil, nil
			}
			continue
		}
		entries = append(entries, kv{key: p.name, value: f, required: required[p.name]})
	}
	for _, r := range s.required {
		if declared[r] {
			continue
		}
		declared[r] = true
		var f frag
		var err error
		switch {
		case s.additional != nil:
			f, err = c.value(s.additional)
		case s.allowExtra:
			f = c.anyValue()
		}
		if err != nil {
			return nil, err
		}
		if f == nil {
			return nil, nil
		}
		entries = append(entries, kv{key: r, value: f, required: true})
	}
	var free frag
	if len(s.props) == 0 && len(s.required) == 0 && (s.additional != nil || s.allowExtra) {
		val := c.anyValue()
		if s.additional != nil {
			var err error
			if val, err = c.value(s.additional); err != nil {
				return nil, err
			}
		}
		if val != nil {
			free = seq(c.freeString(), lit(":"), ws, val)
		}
	}
	if free != nil {
		return objectFrag(nil, free), nil
	}
	return objectFrag(entries, nil), nil
}

// objectFrag emits the entries in order (optional ones may be left out), or, with free,
// any number of free key-value pairs.
func objectFrag(entries []kv, free frag) frag {
	return func(b *builder, next int32) int32 {
		closing := lit("}")(b, next)
		var first int32
		if free != nil {
			loop := b.add(node{kind: nSplit})
			pair := free(b, loop)
			comma := seq(lit(","), ws)(b, pair)
			if b.err != nil {
				return 0
			}
			b.nodes[loop].outs = []int32{comma, closing}
			first = b.add(node{kind: nSplit, outs: []int32{pair, closing}})
		} else {
			first = closing
			after := closing
			for i := len(entries) - 1; i >= 0; i-- {
				e := entries[i]
				key, _ := json.Marshal(e.key)
				pair := seq(lit(string(key)), lit(":"), ws, e.value)(b, after)
				withComma := seq(lit(","), ws)(b, pair)
				if e.required {
					first, after = pair, withComma
				} else {
					first = b.add(node{kind: nSplit, outs: []int32{pair, first}})
					after = b.add(node{kind: nSplit, outs: []int32{withComma, after}})
				}
			}
		}
		return lit("{")(b, first)
	}
}

func (c *compiler) array(s *schema) (frag, error) {
	var item frag
	if s.items == nil {
		item = c.anyValue()
	} else {
		var err error
		if item, err = c.value(s.items); err != nil {
			return nil, err
		}
	}
	if item == nil {
		if s.minItems > 0 {
			return nil, nil
		}
		return lit("[]"), nil
	}
	return arrayFrag(item, s.minItems, s.maxItems), nil
}

// arrayFrag is between min and max items (max -1: unbounded).
func arrayFrag(item frag, min, max int) frag {
	if max == 0 {
		return lit("[]")
	}
	return func(b *builder, next int32) int32 {
		closing := lit("]")(b, next)
		another := seq(lit(","), ws, item)
		// after[k] is the state after k items; build from the last one back.
		var after int32
		top := max
		if max < 0 {
			top = maxInt(min, 1)
			loop := b.add(node{kind: nSplit})
			body := another(b, loop)
			if b.err != nil {
				return 0
			}
			b.nodes[loop].outs = []int32{body, closing}
			after = loop
		} else {
			after = closing
		}
		for k := top - 1; k >= 1; k-- {
			cont := another(b, after)
			if k < min {
				after = cont
			} else {
				after = b.add(node{kind: nSplit, outs: []int32{cont, closing}})
			}
		}
		start := item(b, after)
		if min == 0 {
			start = b.add(node{kind: nSplit, outs: []int32{start, closing}})
		}
		return lit("[")(b, start)
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

func (c *compiler) stringValue(s *schema) frag {
	if s.format != "" {
		return seq(lit(`"`), formatFrag(s.format), lit(`"`))
	}
	return seq(lit(`"`), str(strSpec{min: s.minLength, max: s.maxLength, mode: c.mode}))
}

func formatFrag(format string) frag {
	digit := byteRange('0', '9')
	d2 := func(a, b byte) frag { return seq(byteRange(a, b), digit) }
	hh := alt(d2('0', '1'), seq(lit("2"), byteRange('0', '3')))
	mm := d2('0', '5')
	day28 := alt(seq(lit("0"), byteRange('1', '9')), seq(lit("1"), digit), seq(lit("2"), byteRange('0', '8')))
	day30 := alt(seq(lit("0"), byteRange('1', '9')), seq(byteRange('1', '2'), digit), lit("30"))
	day31 := alt(day30, lit("31"))
	date := seq(byteRange('1', '2'), digit, digit, digit, lit("-"), alt(
		seq(alt(lit("01"), lit("03"), lit("05"), lit("07"), lit("08"), lit("10"), lit("12")), lit("-"), day31),
		seq(alt(lit("04"), lit("06"), lit("09"), lit("11")), lit("-"), day30),
		seq(lit("02-"), day28)))
	tm := seq(hh, lit(":"), mm, lit(":"), mm, opt(seq(lit("."), repeat(digit, 1, 6))),
		alt(lit("Z"), seq(class('+', '+', '-', '-'), hh, lit(":"), mm)))
	hex := class('0', '9', 'a', 'f', 'A', 'F')
	alnum := class('a', 'z', 'A', 'Z', '0', '9')
	switch format {
	case "date":
		return date
	case "time":
		return tm
	case "date-time":
		return seq(date, lit("T"), tm)
	case "uuid":
		return seq(repeat(hex, 8, 8), lit("-"), repeat(hex, 4, 4), lit("-"), repeat(hex, 4, 4), lit("-"), repeat(hex, 4, 4), lit("-"), repeat(hex, 12, 12))
	case "ipv4":
		octet := alt(seq(lit("25"), byteRange('0', '5')), seq(lit("2"), byteRange('0', '4'), digit), seq(lit("1"), digit, digit), seq(byteRange('1', '9'), digit), digit)
		return seq(octet, lit("."), octet, lit("."), octet, lit("."), octet)
	case "email":
		word := repeat(alnum, 1, 16)
		local := seq(word, repeat(seq(class('.', '.', '_', '_', '+', '+', '-', '-'), word), 0, 2))
		label := seq(class('a', 'z', 'A', 'Z'), repeat(alnum, 0, 15))
		return seq(local, lit("@"), label, repeat(seq(lit("."), label), 1, 2))
	}
	panic("constrain: format " + format + " passed the parser but has no grammar")
}

// Numbers. JSON integers without leading zeros; the magnitude is capped at numberCap.

func integerFrag(s *schema) (frag, error) {
	lo, hi, err := integerBounds(s)
	if err != nil {
		return nil, err
	}
	if lo > hi {
		return nil, nil
	}
	return intRange(lo, hi), nil
}

func integerBounds(s *schema) (int64, int64, error) {
	lo, hi := int64(-numberCap), int64(numberCap)
	if b := s.minimum; b != nil {
		v := math.Ceil(b.value)
		if b.exclusive && v == b.value {
			v++
		}
		lo = clampInt(v)
	}
	if b := s.maximum; b != nil {
		v := math.Floor(b.value)
		if b.exclusive && v == b.value {
			v--
		}
		hi = clampInt(v)
	}
	return lo, hi, nil
}

func clampInt(v float64) int64 {
	if v > numberCap {
		return numberCap
	}
	if v < -numberCap {
		return -numberCap
	}
	return int64(v)
}

func numberAll() frag {
	return seq(intRange(-numberCap, numberCap), opt(fraction()))
}

func fraction() frag { return seq(lit("."), repeat(byteRange('0', '9'), 1, fracDigits)) }

// numberFrag: an integer in the range, or n.ddd where every value of that form lies in the
// range (n.ddd lies in [n, n+1) for n >= 0 and in (n-1, n] for n < 0).
func numberFrag(s *schema) (frag, error) {
	if s.minimum == nil && s.maximum == nil {
		return numberAll(), nil
	}
	lo, hi, _ := integerBounds(s)
	if lo > hi {
		if s.minimum != nil && s.maximum != nil && s.minimum.value < s.maximum.value {
			return nil, &UnsupportedError{Path: s.path, Keyword: "minimum", Reason: "a number range with no integer in it"}
		}
		return nil, nil
	}
	fs := []frag{intRange(lo, hi)}
	posLo, posHi := maxI64(lo, 0), hi
	if s.maximum != nil {
		posHi = minI64(hi, clampInt(math.Floor(s.maximum.value))-1)
	}
	if posLo <= posHi {
		fs = append(fs, seq(uintRange(uint64(posLo), uint64(posHi)), fraction()))
	}
	negLo, negHi := maxI64(1, -hi), -lo
	if s.minimum != nil {
		negHi = minI64(-lo, clampInt(math.Floor(-s.minimum.value))-1)
	}
	if negLo <= negHi {
		fs = append(fs, seq(lit("-"), uintRange(uint64(negLo), uint64(negHi)), fraction()))
	}
	return alt(fs...), nil
}

func maxI64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func minI64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// intRange is every integer in [lo, hi] (lo <= hi) written as JSON writes it.
func intRange(lo, hi int64) frag {
	var fs []frag
	if hi >= 0 {
		fs = append(fs, uintRange(uint64(maxI64(lo, 0)), uint64(hi)))
	}
	if lo < 0 {
		fs = append(fs, seq(lit("-"), uintRange(uint64(maxI64(1, -hi)), uint64(-lo))))
	}
	return alt(fs...)
}

// uintRange is every integer in [lo, hi] without leading zeros, by digit count.
func uintRange(lo, hi uint64) frag {
	var fs []frag
	for n := len(strconv.FormatUint(lo, 10)); n <= len(strconv.FormatUint(hi, 10)); n++ {
		a, b := pow10(n-1), pow10(n)-1
		if n == 1 {
			a = 0
		}
		a, b = maxU64(a, lo), minU64(b, hi)
		if a <= b {
			fs = append(fs, sameLength(strconv.FormatUint(a, 10), strconv.FormatUint(b, 10)))
		}
	}
	return alt(fs...)
}

// sameLength is every digit string between a and b, which have the same length.
func sameLength(a, b string) frag {
	if a == "" {
		return empty()
	}
	if a[0] == b[0] {
		return seq(lit(a[:1]), sameLength(a[1:], b[1:]))
	}
	rest := len(a) - 1
	if strings.Trim(a[1:], "0") == "" && strings.Trim(b[1:], "9") == "" {
		return seq(byteRange(a[0], b[0]), digits(rest))
	}
	fs := []frag{seq(lit(a[:1]), sameLength(a[1:], strings.Repeat("9", rest)))}
	if a[0]+1 <= b[0]-1 {
		fs = append(fs, seq(byteRange(a[0]+1, b[0]-1), digits(rest)))
	}
	fs = append(fs, seq(lit(b[:1]), sameLength(strings.Repeat("0", rest), b[1:])))
	return alt(fs...)
}

func digits(n int) frag { return repeat(byteRange('0', '9'), n, n) }

func pow10(n int) uint64 {
	p := uint64(1)
	for i := 0; i < n; i++ {
		p *= 10
	}
	return p
}

func maxU64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func minU64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}
