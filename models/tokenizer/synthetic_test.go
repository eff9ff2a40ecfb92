package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSynthetic(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSynthetic(dir, 512); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() > 512 {
		t.Fatalf("VocabSize %d exceeds 512", tok.VocabSize())
	}
	if !tok.splitter.marks {
		t.Fatal("synthetic tokenizer should use the Qwen3.5 split pattern")
	}
	for _, a := range qwenAddedTokens {
		id, ok := tok.TokenID(a.content)
		if !ok || id >= 512 || tok.IsSpecial(id) != a.special {
			t.Fatalf("added token %q: id %d ok %v special %v", a.content, id, ok, tok.IsSpecial(id))
		}
	}
	text := "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n"
	ids := tok.Encode(text)
	for _, id := range ids {
		if id < 0 || id >= 512 {
			t.Fatalf("id %d out of range", id)
		}
	}
	if got := tok.Decode(ids); got != text {
		t.Fatalf("round trip %q", got)
	}
	if len(ids) > len(text)/2 {
		t.Fatalf("%d ids for %d bytes: merges were not learned or applied", len(ids), len(text))
	}
	// deterministic: a second write is byte-identical
	dir2 := t.TempDir()
	if err := WriteSynthetic(dir2, 512); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		a, _ := os.ReadFile(filepath.Join(dir, name))
		b, _ := os.ReadFile(filepath.Join(dir2, name))
		if string(a) != string(b) {
			t.Fatalf("%s differs between two writes", name)
		}
	}
	// a larger vocabulary learns more merges, still all below the size
	big := t.TempDir()
	if err := WriteSynthetic(big, 4096); err != nil {
		t.Fatal(err)
	}
	tokBig, err := Load(big)
	if err != nil {
		t.Fatal(err)
	}
	if tokBig.VocabSize() <= tok.VocabSize() || tokBig.VocabSize() > 4096 {
		t.Fatalf("vocab sizes %d (4096) and %d (512)", tokBig.VocabSize(), tok.VocabSize())
	}
}

func TestWriteSyntheticTooSmall(t *testing.T) {
	err := WriteSynthetic(t.TempDir(), 200)
	if err == nil || !strings.Contains(err.Error(), "vocab size 200") {
		t.Fatalf("want a vocab size error, got %v", err)
	}
}
