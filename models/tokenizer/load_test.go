package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// mutatedTokenizer writes the synthetic tokenizer.json after edit changes its JSON tree,
// and returns Load's error.
func mutatedTokenizer(t *testing.T, edit func(root map[string]any)) error {
	t.Helper()
	baseOnce.Do(func() {
		dir := t.TempDir()
		if baseErr = WriteSynthetic(dir, 512); baseErr == nil {
			baseJSON, baseErr = os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		}
	})
	if baseErr != nil {
		t.Fatal(baseErr)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenizer.json")
	data := baseJSON
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	edit(root)
	data, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	return err
}

var (
	baseOnce sync.Once
	baseJSON []byte
	baseErr  error
)

func model(root map[string]any) map[string]any { return root["model"].(map[string]any) }

func TestLoadRefusesBadFiles(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"unmodified loads", func(map[string]any) {}, ""},
		{"wordpiece", func(r map[string]any) { model(r)["type"] = "WordPiece" }, `model.type: "WordPiece" is not supported`},
		{"unigram", func(r map[string]any) { model(r)["type"] = "Unigram" }, `model.type: "Unigram"`},
		{"no model", func(r map[string]any) { delete(r, "model") }, "model: missing"},
		{"no vocab", func(r map[string]any) { delete(model(r), "vocab") }, "model.vocab: missing"},
		{"no merges", func(r map[string]any) { delete(model(r), "merges") }, "model.merges: missing"},
		{"merge of unknown tokens", func(r map[string]any) {
			model(r)["merges"] = []any{[]any{"zzz", "qqq"}}
		}, `model.merges[0]: "zzz" "qqq"`},
		{"legacy merges format", func(r map[string]any) {
			var lines []any
			for _, m := range model(r)["merges"].([]any) {
				p := m.([]any)
				lines = append(lines, p[0].(string)+" "+p[1].(string))
			}
			model(r)["merges"] = lines
		}, ""},
		{"byte fallback", func(r map[string]any) { model(r)["byte_fallback"] = true }, "model.byte_fallback"},
		{"missing byte token", func(r map[string]any) { delete(model(r)["vocab"].(map[string]any), "Ā") }, "no token for byte 0x00"},
		{"no pre-tokenizer", func(r map[string]any) { delete(r, "pre_tokenizer") }, "pre_tokenizer: missing"},
		{"unknown split regex", func(r map[string]any) {
			pt := r["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)
			pt["pattern"] = map[string]any{"Regex": `\w+`}
		}, `pattern.Regex: "\\w+" is not one of`},
		{"lowercase normalizer", func(r map[string]any) { r["normalizer"] = map[string]any{"type": "Lowercase"} }, `normalizer: type "Lowercase"`},
		{"wordpiece decoder", func(r map[string]any) { r["decoder"] = map[string]any{"type": "WordPiece"} }, `decoder: type "WordPiece"`},
		{"lstrip added token", func(r map[string]any) {
			r["added_tokens"].([]any)[0].(map[string]any)["lstrip"] = true
		}, `added_tokens[0] "<|endoftext|>": single_word/lstrip/rstrip`},
	}
	for _, c := range cases {
		err := mutatedTokenizer(t, c.edit)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("want an error naming tokenizer.json, got %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": [`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "parse tokenizer.json") {
		t.Fatalf("want a parse error, got %v", err)
	}
}

// TestSplitter pins pre-tokenization details that the golden corpus exercises only in
// part, for both patterns (expected pieces worked out from the regex semantics).
func TestSplitter(t *testing.T) {
	cases := []struct {
		marks bool
		in    string
		want  []string
	}{
		{false, "a  b", []string{"a", " ", " b"}},
		{false, "a \n\n b ", []string{"a", " \n\n", " b", " "}},
		{false, "x\t\ty", []string{"x", "\t", "\ty"}},
		{false, "it's 'LL 'sup", []string{"it", "'s", " '", "LL", " '", "sup"}},
		{false, "abc123", []string{"abc", "1", "2", "3"}},
		{false, "((a))!!\n\nb", []string{"((", "a", "))!!\n\n", "b"}},
		{false, " ?!", []string{" ?!"}},
		{false, "\u00a0non", []string{"\u00a0non"}},
		// a combining mark is a symbol for Qwen2/3 and part of the word for Qwen3.5
		{false, "e\u0301x \u0301y", []string{"e", "\u0301x", " \u0301", "y"}},
		{true, "e\u0301x \u0301y", []string{"e\u0301x", " \u0301y"}},
		{true, "\u0915\u094d\u0937", []string{"\u0915\u094d\u0937"}},
	}
	for _, c := range cases {
		var got []string
		sp := splitter{marks: c.marks}
		sp.split(c.in, func(p string) { got = append(got, p) })
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("marks=%v split(%q) = %q, want %q", c.marks, c.in, got, c.want)
		}
	}
}
