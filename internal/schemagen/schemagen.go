// Package schemagen draws random JSON Schemas that use every keyword the structured-output
// engine supports (exec/constrain): objects with required and optional properties and the
// three forms of additionalProperties, arrays with min/maxItems, strings with lengths and
// every supported format, integers and numbers with (exclusive) bounds, booleans, null,
// enum, const, type lists, anyOf, oneOf, $ref/$defs and a recursive $ref. Tests of the
// engine and of the server share it.
package schemagen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// generator draws schemas that use the supported keywords, nested up to a depth.
type generator struct {
	rng  *rand.Rand
	defs map[string]any
}

func (g *generator) schema(depth int) map[string]any {
	r := g.rng
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum", "const", "format", "typelist"}
	if depth > 0 {
		kinds = append(kinds, "object", "object", "array", "array", "anyOf", "oneOf", "ref")
	}
	switch kinds[r.IntN(len(kinds))] {
	case "string":
		s := map[string]any{"type": "string"}
		if r.IntN(2) == 0 {
			s["minLength"] = r.IntN(4)
		}
		if r.IntN(2) == 0 {
			s["maxLength"] = 4 + r.IntN(12)
		}
		return s
	case "format":
		formats := []string{"date", "time", "date-time", "email", "uuid", "ipv4"}
		return map[string]any{"type": "string", "format": formats[r.IntN(len(formats))]}
	case "integer":
		s := map[string]any{"type": "integer"}
		lo := r.IntN(2000) - 1000
		switch r.IntN(4) {
		case 0:
			s["minimum"] = lo
		case 1:
			s["maximum"] = lo
		case 2:
			s["minimum"], s["maximum"] = lo, lo+r.IntN(500)
		case 3:
			s["exclusiveMinimum"], s["exclusiveMaximum"] = lo, lo+2+r.IntN(50)
		}
		return s
	case "number":
		s := map[string]any{"type": "number"}
		switch r.IntN(3) {
		case 0:
			s["minimum"], s["maximum"] = -2.5, 7.25
		case 1:
			s["exclusiveMinimum"] = float64(r.IntN(100)) - 0.5
		}
		return s
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "null":
		return map[string]any{"type": "null"}
	case "enum":
		return map[string]any{"enum": []any{"red", "green", 3, nil, true, "a \"quoted\" word"}[:1+r.IntN(6)]}
	case "const":
		return map[string]any{"const": []any{"fixed", 42, map[string]any{"k": []any{1, 2}}}[r.IntN(3)]}
	case "typelist":
		return map[string]any{"type": []any{"string", "null"}, "maxLength": 8}
	case "object":
		return g.object(depth)
	case "array":
		s := map[string]any{"type": "array", "items": g.schema(depth - 1)}
		if r.IntN(2) == 0 {
			s["minItems"] = r.IntN(3)
		}
		if r.IntN(2) == 0 {
			s["maxItems"] = 3 + r.IntN(3)
		}
		return s
	case "anyOf":
		return map[string]any{"anyOf": []any{g.schema(depth - 1), g.schema(depth - 1)}}
	case "oneOf":
		return map[string]any{"oneOf": []any{
			map[string]any{"type": "string", "maxLength": 6},
			map[string]any{"type": "integer", "minimum": 0},
			map[string]any{"type": "object", "properties": map[string]any{"x": g.schema(depth - 1)}, "required": []any{"x"}},
		}[:2+r.IntN(2)]}
	case "ref":
		name := fmt.Sprintf("d%d", len(g.defs))
		g.defs[name] = nil // reserve the name before the definition draws more
		g.defs[name] = g.schema(depth - 1)
		return map[string]any{"$ref": "#/$defs/" + name}
	}
	panic("unreachable")
}

// Schema returns a random JSON Schema document (compact JSON).
func Schema(rng *rand.Rand) []byte {
	g := &generator{rng: rng, defs: map[string]any{}}
	root := g.schema(3)
	if rng.IntN(5) == 0 {
		// a recursive tree: children refer back to the root
		root = map[string]any{"type": "object", "properties": map[string]any{
			"label":    map[string]any{"type": "string", "maxLength": 5},
			"children": map[string]any{"type": "array", "items": map[string]any{"$ref": "#"}, "maxItems": 2}},
			"required": []any{"label"}}
	}
	if len(g.defs) > 0 {
		root["$defs"] = g.defs
	}
	doc, err := json.Marshal(root)
	if err != nil {
		panic(err)
	}
	return doc
}

func (g *generator) object(depth int) map[string]any {
	r := g.rng
	props := map[string]any{}
	var req []any
	for i := 0; i < 1+r.IntN(4); i++ {
		name := fmt.Sprintf("p%d_%s", i, []string{"id", "name", "value", "ok"}[r.IntN(4)])
		props[name] = g.schema(depth - 1)
		if r.IntN(2) == 0 {
			req = append(req, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props}
	if len(req) > 0 {
		s["required"] = req
	}
	switch r.IntN(3) {
	case 0:
		s["additionalProperties"] = false
	case 1:
		s["additionalProperties"] = map[string]any{"type": "integer"}
	}
	return s
}

// Parameters returns a random tool parameters schema: an object of random properties.
func Parameters(rng *rand.Rand) []byte {
	g := &generator{rng: rng, defs: map[string]any{}}
	root := g.object(2)
	if len(g.defs) > 0 {
		root["$defs"] = g.defs
	}
	doc, err := json.Marshal(root)
	if err != nil {
		panic(err)
	}
	return doc
}
