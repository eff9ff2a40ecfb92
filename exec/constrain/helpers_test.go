package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"pistil/internal/fixtures"
	"pistil/models/tokenizer"
)

var (
	qwenOnce  sync.Once
	qwenV     *Vocab
	qwenTok   *tokenizer.Tokenizer
	qwenErr   error
	synthOnce sync.Once
	synthV    *Vocab
	synthTok  *tokenizer.Tokenizer
	synthErr  error
)

// qwenVocab is the real Qwen tokenizer.json, indexed once per test binary.
func qwenVocab(t testing.TB) (*Vocab, *tokenizer.Tokenizer) {
	t.Helper()
	qwenOnce.Do(func() {
		qwenTok, qwenErr = tokenizer.Load(fixtures.Tokenizer())
		if qwenErr == nil {
			qwenV, qwenErr = NewVocab(qwenTok, qwenTok.VocabSize(), endTokens(qwenTok))
		}
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenV, qwenTok
}

// synthVocab is the synthetic byte-level tokenizer the tiny test models use.
func synthVocab(t testing.TB) (*Vocab, *tokenizer.Tokenizer) {
	t.Helper()
	synthOnce.Do(func() {
		dir, err := os.MkdirTemp("", "constrain-tok-")
		if err != nil {
			synthErr = err
			return
		}
		defer os.RemoveAll(dir)
		if synthErr = tokenizer.WriteSynthetic(dir, 1024); synthErr != nil {
			return
		}
		synthTok, synthErr = tokenizer.Load(dir)
		if synthErr == nil {
			synthV, synthErr = NewVocab(synthTok, synthTok.VocabSize(), endTokens(synthTok))
		}
	})
	if synthErr != nil {
		t.Fatal(synthErr)
	}
	return synthV, synthTok
}

func endTokens(tok *tokenizer.Tokenizer) []int32 {
	var out []int32
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(s); ok {
			out = append(out, id)
		}
	}
	return out
}

// validator compiles a schema with format assertion on (formats are checked, not
// annotations).
func validator(t testing.TB, doc []byte) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("schema does not parse: %v\n%s", err, doc)
	}
	if err := c.AddResource("schema.json", v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("validator rejects the schema: %v\n%s", err, doc)
	}
	return s
}

func validate(s *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return s.Validate(v)
}

// noiseGenerate runs a matcher with a random choice among the allowed tokens at every
// step (what a random-weight model does under the mask) and returns the text.
func noiseGenerate(t testing.TB, g *Grammar, v *Vocab, maxTokens int, rng *rand.Rand) (string, bool) {
	t.Helper()
	m, err := g.NewMatcher(v, false)
	if err != nil {
		t.Fatal(err)
	}
	mask := make([]uint64, v.words)
	var out []byte
	for i := 0; i < maxTokens; i++ {
		n := m.Mask(mask, maxTokens-i)
		if n == 0 {
			t.Fatalf("empty mask after %q", out)
		}
		id := nthSet(mask, rng.IntN(n))
		if err := m.Accept(id); err != nil {
			t.Fatalf("mask allowed token %d that Accept rejects after %q", id, out)
		}
		if m.Done() {
			return string(out), true
		}
		if b := v.tokens[id]; b != nil {
			out = append(out, b...)
		} else {
			out = append(out, symbolText(v, id)...)
		}
	}
	return string(out), false
}

func symbolText(v *Vocab, id int32) string {
	switch {
	case len(v.syms[symToolCallOpen]) > 0 && id == v.syms[symToolCallOpen][0]:
		return "<tool_call>"
	case len(v.syms[symToolCallClose]) > 0 && id == v.syms[symToolCallClose][0]:
		return "</tool_call>"
	}
	return fmt.Sprintf("<sym %d>", id)
}

func nthSet(mask []uint64, n int) int32 {
	for w, word := range mask {
		c := bits.OnesCount64(word)
		if n >= c {
			n -= c
			continue
		}
		for ; n > 0; n-- {
			word &= word - 1
		}
		return int32(w*64 + bits.TrailingZeros64(word))
	}
	return -1
}

// randomSchema draws a schema that uses the supported keywords, nested up to depth.
type schemaGen struct {
	rng  *rand.Rand
	defs map[string]any
}

func (g *schemaGen) schema(depth int) map[string]any {
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

func randomSchema(rng *rand.Rand) []byte {
	g := &schemaGen{rng: rng, defs: map[string]any{}}
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
