package tokenizer

import (
	"encoding/json"
	"os"
	"pistil/internal/fixtures"
	"strings"
	"testing"
)

// mixedCorpus builds about 10 MB of text from the golden corpus strings (multilingual prose,
// code, emoji, whitespace runs, digits) by repeating them with a running counter, so that
// the word cache sees a realistic mix of repeated and new pieces.
func mixedCorpus(tb testing.TB) string {
	tb.Helper()
	data, err := os.ReadFile(fixtures.Path("tokenizer/corpus.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var texts []string
	if err := json.Unmarshal(data, &texts); err != nil {
		tb.Fatal(err)
	}
	const size = 10 << 20
	var b strings.Builder
	b.Grow(size + 4096)
	for n := 0; b.Len() < size; n++ {
		t := texts[n%len(texts)]
		b.WriteString(t)
		b.WriteString(" ")
		b.WriteString(itoa(n))
		b.WriteString("\n")
	}
	return b.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

// BenchmarkEncode reports single-core encode throughput (MB/s) over a mixed 10 MB corpus.
// Run: go test ./models/tokenizer -run '^$' -bench Encode -cpu 1
func BenchmarkEncode(b *testing.B) {
	tok := loadQwen3(b)
	corpus := mixedCorpus(b)
	// Split into documents so the measurement includes per-call overhead as a server sees it.
	docs := strings.SplitAfter(corpus, "\n")
	b.SetBytes(int64(len(corpus)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.bpe.mu.Lock()
		tok.bpe.cache = make(map[string][]int32) // measure from a cold cache every pass
		tok.bpe.mu.Unlock()
		for _, d := range docs {
			tok.Encode(d)
		}
	}
}

// BenchmarkLoad measures loading the real 11 MB Qwen3 tokenizer.json.
func BenchmarkLoad(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Load(qwen3Dir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := loadQwen3(b)
	corpus := mixedCorpus(b)[:1<<20]
	ids := tok.Encode(corpus)
	b.SetBytes(int64(len(corpus)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Decode(ids)
	}
}

// BenchmarkEncodeUniqueWords is the cache's worst case: the corpus strings with a
// different letter suffix glued to every word on each repetition, so almost every
// pre-token is new and goes through the BPE merge loop.
func BenchmarkEncodeUniqueWords(b *testing.B) {
	tok := loadQwen3(b)
	base := mixedCorpus(b)[:2<<20]
	var sb strings.Builder
	n := 0
	for _, w := range strings.SplitAfter(base, " ") {
		sb.WriteString(strings.TrimSuffix(w, " "))
		for k := n; k > 0; k /= 26 {
			sb.WriteByte(byte('a' + k%26))
		}
		n++
		if strings.HasSuffix(w, " ") {
			sb.WriteByte(' ')
		}
	}
	corpus := sb.String()
	docs := strings.SplitAfter(corpus, "\n")
	b.SetBytes(int64(len(corpus)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.bpe.mu.Lock()
		tok.bpe.cache = make(map[string][]int32)
		tok.bpe.mu.Unlock()
		for _, d := range docs {
			tok.Encode(d)
		}
	}
}
