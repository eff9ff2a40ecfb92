package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"slices"
	"sync"
	"testing"
)

// qwen3Dir holds the real Qwen3 tokenizer.json and the goldens made from it by Hugging Face
// tokenizers (../shared/golden/make_tokenizer_golden.py).
var qwen3Dir = fixtures.Path("tokenizer/qwen3")

type golden struct {
	Encode []struct {
		Text    string  `json:"text"`
		IDs     []int32 `json:"ids"`
		Decoded string  `json:"decoded"`
	} `json:"encode"`
	Chat []struct {
		Name string  `json:"name"`
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"chat"`
}

var (
	qwen3Once sync.Once
	qwen3Tok  *Tokenizer
	qwen3Err  error
)

// loadQwen3 loads the 11 MB tokenizer once per test binary.
func loadQwen3(tb testing.TB) *Tokenizer {
	tb.Helper()
	qwen3Once.Do(func() { qwen3Tok, qwen3Err = Load(qwen3Dir) })
	if qwen3Err != nil {
		tb.Fatal(qwen3Err)
	}
	return qwen3Tok
}

func loadGolden(tb testing.TB) golden {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(qwen3Dir, "golden.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatal(err)
	}
	if len(g.Encode) == 0 || len(g.Chat) == 0 {
		tb.Fatal("golden.json has no cases")
	}
	return g
}

func TestGoldenEncode(t *testing.T) {
	tok := loadQwen3(t)
	for _, c := range loadGolden(t).Encode {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
			continue
		}
		if dec := tok.Decode(c.IDs); dec != c.Decoded {
			t.Errorf("Decode(%v) = %q, want %q", c.IDs, dec, c.Decoded)
		}
	}
}

// TestGoldenChatIDs encodes the rendered chat prompts, which mix special tokens and text.
func TestGoldenChatIDs(t *testing.T) {
	tok := loadQwen3(t)
	for _, c := range loadGolden(t).Chat {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode\n got %v\nwant %v", c.Name, got, c.IDs)
		}
	}
}

// TestConcurrentEncode: one Tokenizer serves many requests at once (the word cache is
// shared); results must not depend on interleaving. Run with -race to check the locking.
func TestConcurrentEncode(t *testing.T) {
	tok := loadQwen3(t)
	cases := loadGolden(t).Encode
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := range cases {
				c := cases[(i+w*7)%len(cases)]
				if !slices.Equal(tok.Encode(c.Text), c.IDs) {
					errs <- c.Text
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for text := range errs {
		t.Errorf("concurrent Encode(%q) differs from the golden ids", text)
	}
}
