package constrain

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"pistil/internal/schemagen"
)

// Every generation a random chooser makes under the mask is valid JSON that validates
// against its schema, over random schemas that use every supported keyword.
func TestRandomSchemasValidate(t *testing.T) {
	v, _ := synthVocab(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		doc := schemagen.Schema(rng)
		g, err := CompileSchema(doc)
		if err != nil {
			t.Fatalf("schema %d does not compile: %v\n%s", i, err, doc)
		}
		val := validator(t, doc)
		text, done := noiseGenerate(t, g, v, 400, rng)
		if !done {
			t.Fatalf("schema %d: no end within 400 tokens: %q\n%s", i, text, doc)
		}
		if err := validate(val, text); err != nil {
			t.Fatalf("schema %d: %q does not validate: %v\n%s", i, text, err, doc)
		}
	}
}

// The same on the real Qwen vocabulary (fewer schemas: each mask covers 248,320 tokens).
func TestRandomSchemasValidateQwen(t *testing.T) {
	v, _ := qwenVocab(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 40; i++ {
		doc := schemagen.Schema(rng)
		g, err := CompileSchema(doc)
		if err != nil {
			t.Fatalf("schema %d does not compile: %v\n%s", i, err, doc)
		}
		text, done := noiseGenerate(t, g, v, 200, rng)
		if !done {
			t.Fatalf("schema %d: no end within 200 tokens: %q\n%s", i, text, doc)
		}
		if err := validate(validator(t, doc), text); err != nil {
			t.Fatalf("schema %d: %q does not validate: %v\n%s", i, text, err, doc)
		}
	}
}

// The mask is exactly the set of tokens whose bytes the automaton accepts and that leave
// the grammar completable in the budget: checked token by token against the fast paths
// and the trie walk, at every step of random generations.
func TestMaskMatchesTokenByToken(t *testing.T) {
	v, _ := synthVocab(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 30; i++ {
		doc := schemagen.Schema(rng)
		g, err := CompileSchema(doc)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := g.NewMatcher(v, false)
		mask := make([]uint64, v.words)
		budget := 120
		if i%2 == 1 {
			budget = 12 // too small for most schemas: the least-to-write tokens
		}
		for step := 0; step < budget && !m.Done(); step++ {
			left := budget - step
			n := m.Mask(mask, left)
			// within the budget; when no token is, the tokens that leave the least to write
			limit := int32(left - 1)
			least := int32(1 << 30)
			for id := int32(0); int(id) < v.size; id++ {
				if next := m.next(m.state, id); next >= 0 {
					least = min(least, m.a.states[next].dist)
				}
			}
			limit = max(limit, least)
			for id := int32(0); int(id) < v.size; id++ {
				next := m.next(m.state, id)
				want := next >= 0 && m.a.states[next].dist <= limit
				got := mask[id>>6]&(1<<(uint(id)&63)) != 0
				if got != want {
					t.Fatalf("schema %d step %d: token %d %q: mask %v, automaton %v\n%s", i, step, id, v.tokens[id], got, want, doc)
				}
			}
			if err := m.Accept(nthSet(mask, rng.IntN(n))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestUnsupportedKeywordIsNamed(t *testing.T) {
	for _, c := range []struct{ schema, keyword string }{
		{`{"type":"string","pattern":"^a+$"}`, "pattern"},
		{`{"type":"object","patternProperties":{"^x":{}}}`, "patternProperties"},
		{`{"type":"integer","multipleOf":3}`, "multipleOf"},
		{`{"allOf":[{"type":"string"}]}`, "allOf"},
		{`{"type":"array","prefixItems":[{"type":"string"}]}`, "prefixItems"},
		{`{"type":"string","format":"hostname"}`, "format"},
		{`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, "oneOf"},
		{`{"type":"object","properties":{"a":{"not":{}}}}`, "not"},
		{`{"$ref":"https://example.com/s.json"}`, "$ref"},
	} {
		_, err := CompileSchema([]byte(c.schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Keyword != c.keyword || !strings.Contains(err.Error(), c.keyword) {
			t.Errorf("%s: got %v, want an error naming %q", c.schema, err, c.keyword)
		}
	}
	for _, bad := range []string{`[1]`, `{"type":"strin"}`, `{"minLength":-1}`, `{"$ref":"#/$defs/missing"}`, `{"type":"string","minLength":5,"maxLength":2}`} {
		if _, err := CompileSchema([]byte(bad)); err == nil {
			t.Errorf("%s compiled", bad)
		}
	}
}

func TestJSONObjectGrammar(t *testing.T) {
	v, _ := synthVocab(t)
	rng := rand.New(rand.NewPCG(7, 8))
	val := validator(t, []byte(`{"type":"object"}`))
	for i := 0; i < 50; i++ {
		text, done := noiseGenerate(t, JSONObject(), v, 200, rng)
		if !done {
			t.Fatalf("no end: %q", text)
		}
		if err := validate(val, text); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
	}
}

func TestIntegerRangesExact(t *testing.T) {
	// Every integer the grammar accepts is in range, and every one in range is accepted.
	v, _ := synthVocab(t)
	for _, r := range [][2]int{{-13, 7}, {0, 0}, {5, 120}, {-1000, -999}, {99, 1001}, {-5, -1}} {
		doc := []byte(`{"type":"integer","minimum":` + itoa(r[0]) + `,"maximum":` + itoa(r[1]) + `}`)
		g, err := CompileSchema(doc)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := g.NewMatcher(v, false)
		for n := r[0] - 30; n <= r[1]+30; n++ {
			state := m.a.stepBytes(m.a.start, []byte(itoa(n)))
			accepts := state >= 0 && m.a.stepSym(state, symEnd) >= 0
			if want := n >= r[0] && n <= r[1]; accepts != want {
				t.Errorf("range %v: %d accepted %v", r, n, accepts)
			}
		}
		for _, bad := range []string{"-0", "01", "00", "+1", "1.0"} {
			state := m.a.stepBytes(m.a.start, []byte(bad))
			if state >= 0 && m.a.stepSym(state, symEnd) >= 0 {
				t.Errorf("range %v accepts %q", r, bad)
			}
		}
	}
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
