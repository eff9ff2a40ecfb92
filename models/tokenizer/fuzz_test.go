package tokenizer

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"pistil/internal/fixtures"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var (
	synthOnce sync.Once
	synthTok  *Tokenizer
	synthErr  error
)

// loadSynthetic is the Qwen3.5-pattern tokenizer WriteSynthetic makes (vocab 512).
func loadSynthetic(tb testing.TB) *Tokenizer {
	tb.Helper()
	synthOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pistil-synth-tok")
		if err != nil {
			synthErr = err
			return
		}
		defer os.RemoveAll(dir)
		if synthErr = WriteSynthetic(dir, 512); synthErr == nil {
			synthTok, synthErr = Load(dir)
		}
	})
	if synthErr != nil {
		tb.Fatal(synthErr)
	}
	return synthTok
}

// corpusSeeds adds the golden corpus strings (and a few hostile ones) to a fuzz corpus.
func corpusSeeds(f *testing.F) []string {
	data, err := os.ReadFile(fixtures.Path("tokenizer/corpus.json"))
	if err != nil {
		f.Fatal(err)
	}
	var texts []string
	if err := json.Unmarshal(data, &texts); err != nil {
		f.Fatal(err)
	}
	return append(texts,
		"e\u0301\u0323 a\u0308\u0304 \u1100\u1161\u11a8 \u0915\u094d\u0937",
		"<|im_start|><|im_start|<|im_end|><think></think>",
		"   \t\n\r\n \u00a0\u2028\u3000 x",
		"'S 'LL ſ 'ſ 'Re",
		"\xff\xfe invalid \xc3",
	)
}

// FuzzRoundTrip: for valid UTF-8, decode(encode(s)) == NFC(s) with both the Qwen3 and the
// Qwen3.5-pattern tokenizers; for any bytes, encode does not panic and yields valid ids.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range corpusSeeds(f) {
		f.Add(s)
	}
	toks := []*Tokenizer{loadQwen3(f), loadSynthetic(f)}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			ids := tok.Encode(s)
			for _, id := range ids {
				if _, ok := tok.Token(id); !ok {
					t.Fatalf("Encode(%q) produced unused id %d", s, id)
				}
			}
			got := tok.Decode(ids)
			if !utf8.ValidString(s) {
				if !utf8.ValidString(got) {
					t.Fatalf("Decode returned invalid UTF-8 %q", got)
				}
				continue
			}
			if want := norm.NFC.String(s); got != want {
				t.Fatalf("decode(encode(%q)) = %q, want NFC %q (ids %v)", s, got, want, ids)
			}
		}
	})
}

// FuzzStreamDecoder: for any ids (arbitrary, including unused ones and characters split
// across tokens) pushed one at a time, every chunk is valid UTF-8 and the streamed text
// equals Decode of all the ids.
func FuzzStreamDecoder(f *testing.F) {
	tok := loadQwen3(f)
	for _, s := range corpusSeeds(f) {
		var b []byte
		for _, id := range tok.Encode(s) {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ids []int32
		for i := 0; i+4 <= len(raw); i += 4 {
			ids = append(ids, int32(binary.LittleEndian.Uint32(raw[i:])%uint32(tok.VocabSize()+10)))
		}
		want := tok.Decode(ids)
		sd := tok.NewStreamDecoder()
		var got string
		for _, id := range ids {
			chunk := sd.Push(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("chunk %q is not valid UTF-8", chunk)
			}
			got += chunk
		}
		got += sd.Flush()
		if got != want {
			t.Fatalf("streamed %q, Decode %q (ids %v)", got, want, ids)
		}
	})
}

// FuzzParse: any bytes given as tokenizer.json are either loaded or refused with an error;
// never a panic or a runaway allocation.
func FuzzParse(f *testing.F) {
	dir := f.TempDir()
	if err := WriteSynthetic(dir, 300); err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(dir + "/tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 2147483647}, "merges": []}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": [["a"]]}, "pre_tokenizer": null}`))
	f.Add([]byte(`{"added_tokens": [{"id": -1, "content": ""}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		ids := tok.Encode("Hello <|im_end|> wörld 123")
		_ = tok.Decode(ids)
	})
}
