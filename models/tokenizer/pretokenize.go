package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The two Split patterns this family ships. Go's regexp cannot run them (no lookahead), so
// splitter below implements them by hand with the same leftmost-first, greedy, backtracking
// semantics; splitPatterns maps each supported pattern to its flavour.
const (
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen3.5/3.6 ("qwen35", model-spec.md §5.1): combining marks join letters.
	patternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var splitPatterns = map[string]bool{ // value: whether \p{M} joins letters
	patternQwen2:  false,
	patternQwen35: true,
}

// splitter cuts normalized text into pre-tokens.
type splitter struct {
	marks bool // Qwen3.5 flavour: [\p{L}\p{M}] is the word class
}

// runeAt decodes the rune at i with an ASCII fast path; size 0 at the end of s.
func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return unicode.IsSpace(r)
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return (r|0x20) >= 'a' && (r|0x20) <= 'z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isMark(r rune) bool {
	return r >= utf8.RuneSelf && unicode.IsMark(r)
}

// isWord is the pattern's word class: \p{L}, or [\p{L}\p{M}] in the Qwen3.5 flavour.
func (sp *splitter) isWord(r rune) bool {
	return isLetter(r) || (sp.marks && isMark(r))
}

// isSymbol is [^\s\p{L}\p{N}] (with \p{M} excluded too in the Qwen3.5 flavour).
func (sp *splitter) isSymbol(r rune) bool {
	return r >= 0 && !isSpace(r) && !isNumber(r) && !sp.isWord(r)
}

// split calls emit for each pre-token of s, in order; pieces cover s exactly.
func (sp *splitter) split(s string, emit func(piece string)) {
	sp.splitWhile(s, func(piece string) bool { emit(piece); return true })
}

// splitWhile is split that stops as soon as emit returns false.
func (sp *splitter) splitWhile(s string, emit func(piece string) bool) {
	for i := 0; i < len(s); {
		n := sp.match(s, i)
		if !emit(s[i : i+n]) {
			return
		}
		i += n
	}
}

// match returns the length of the pre-token starting at i (always > 0 when i < len(s)).
// Alternatives are tried in the pattern's order; the first that matches wins.
func (sp *splitter) match(s string, i int) int {
	r, size := runeAt(s, i)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i+1); n > 0 {
			return 1 + n
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+ : the optional prefix is greedy, so first try it consumed.
	if sp.isWord(r) {
		return size + sp.wordRun(s, i+size)
	}
	if r != '\r' && r != '\n' && !isNumber(r) {
		if r2, size2 := runeAt(s, i+size); size2 > 0 && sp.isWord(r2) {
			return size + size2 + sp.wordRun(s, i+size+size2)
		}
	}

	// \p{N}
	if isNumber(r) {
		return size
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := i
	if r == ' ' {
		if r2, _ := runeAt(s, i+1); sp.isSymbol(r2) {
			start = i + 1
		}
	}
	if r2, _ := runeAt(s, start); sp.isSymbol(r2) {
		j := start
		for {
			r3, n := runeAt(s, j)
			if n == 0 || !sp.isSymbol(r3) {
				break
			}
			j += n
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}

	// Only whitespace alternatives remain; r is whitespace here (every other rune matched
	// above: letters, numbers, symbols).
	end := i
	lastNewline := -1
	lastStart := i // start of the run's last rune
	for {
		r3, n := runeAt(s, end)
		if n == 0 || !isSpace(r3) {
			break
		}
		if r3 == '\r' || r3 == '\n' {
			lastNewline = end
		}
		lastStart = end
		end += n
	}
	if end == i { // unreachable for valid input; guarantees progress
		return size
	}
	// \s*[\r\n]+ : ends after the run's last newline.
	if lastNewline >= 0 {
		return lastNewline + 1 - i
	}
	// \s+(?!\S) : the whole run at the end of text, else the run minus its last rune.
	if end == len(s) {
		return end - i
	}
	if lastStart > i {
		return lastStart - i
	}
	// \s+
	return end - i
}

// wordRun is the byte length of the run of word runes starting at j.
func (sp *splitter) wordRun(s string, j int) int {
	start := j
	for {
		r, n := runeAt(s, j)
		if n == 0 || !sp.isWord(r) {
			return j - start
		}
		j += n
	}
}

// contraction matches s|t|re|ve|m|ll|d case-insensitively at j and returns its byte
// length, or 0. Unicode simple case folding makes U+017F (long s) match 's' as well.
func contraction(s string, j int) int {
	r, n := runeAt(s, j)
	if n == 0 {
		return 0
	}
	var second rune // the contraction's second letter, if it has one
	switch unicode.ToLower(r) {
	case 's', 0x17F, 't', 'm', 'd':
		return n
	case 'r', 'v':
		second = 'e'
	case 'l':
		second = 'l'
	default:
		return 0
	}
	if r2, n2 := runeAt(s, j+n); n2 > 0 && unicode.ToLower(r2) == second {
		return n + n2
	}
	return 0
}
