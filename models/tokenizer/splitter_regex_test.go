package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// regexPieces splits s with a backtracking regex engine the way the Split pre-tokenizer
// (behavior Isolated) does: every match, and every gap between matches, is a piece.
func regexPieces(t *testing.T, re *regexp2.Regexp, s string) []string {
	t.Helper()
	runes := []rune(s)
	var pieces []string
	pos := 0
	m, err := re.FindRunesMatch(runes)
	for ; err == nil && m != nil; m, err = re.FindNextMatch(m) {
		if m.RuneIndex > pos {
			pieces = append(pieces, string(runes[pos:m.RuneIndex]))
		}
		if m.RuneLength > 0 {
			pieces = append(pieces, string(runes[m.RuneIndex:m.RuneIndex+m.RuneLength]))
		}
		pos = m.RuneIndex + m.RuneLength
	}
	if err != nil {
		t.Fatal(err)
	}
	if pos < len(runes) {
		pieces = append(pieces, string(runes[pos:]))
	}
	return pieces
}

// FuzzSplitterMatchesRegex checks the hand-written splitter against the patterns
// themselves, run by regexp2 (a backtracking engine with lookahead), for both flavours.
// U+017F is left out: Unicode case folding (Oniguruma, Rust regex) matches it with 's'
// in (?i:'s), regexp2's lowercasing does not.
func FuzzSplitterMatchesRegex(f *testing.F) {
	for _, s := range corpusSeeds(f) {
		f.Add(s)
	}
	f.Add("a  b\t\t c \n\n d \u00a0\u3000e\u0301\u0308x 'S'Ve'LL'd \u0301\u0301 ((x)) \r\n\r\n")
	engines := []struct {
		sp splitter
		re *regexp2.Regexp
	}{
		{splitter{marks: false}, regexp2.MustCompile(patternQwen2, regexp2.None)},
		{splitter{marks: true}, regexp2.MustCompile(patternQwen35, regexp2.None)},
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0x17F) {
			return
		}
		for _, e := range engines {
			var got []string
			e.sp.split(s, func(p string) { got = append(got, p) })
			want := regexPieces(t, e.re, s)
			if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("marks=%v split(%q)\n got %q\nwant %q", e.sp.marks, s, got, want)
			}
		}
	})
}
