package constrain

import (
	"bytes"
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
