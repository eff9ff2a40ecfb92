// Package tokenizer is a byte-level BPE tokenizer that reproduces Hugging Face tokenizers
// exactly for the Qwen2/3/3.5/3.6 tokenizer.json files: added tokens matched first as
// whole literals (longest match), NFC, the family's Split pattern, byte-level BPE by merge
// rank, no BOS.
package tokenizer

import (
	"sort"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is safe for concurrent use.
type Tokenizer struct {
	splitter splitter
	bpe      bpeModel
	vocab    map[string]int32 // byte-level token string -> id

	added     map[string]int32 // added token content -> id
	addedByID map[int32]addedToken
	matcher   addedMatcher

	maxID   int32
	idToken []string // id -> token string ("" for unused ids)
	idBytes [][]byte // id -> decoded bytes
	// maxTokenBytes is the longest vocabulary token in bytes (added tokens excluded): a
	// text of n bytes has at least n/maxTokenBytes ids.
	maxTokenBytes int
}

type addedToken struct {
	content string
	special bool
}

// Encode returns the ids of text: added tokens first, then NFC, split and BPE on the text
// between them. No BOS or EOS is added. Every added token's text becomes its token, so
// Encode is for text the user writes whole (a raw completion prompt); text from anyone
// else goes through EncodeText.
func (t *Tokenizer) Encode(text string) []int32 {
	ids, _ := t.AppendEncode(nil, text, -1)
	return ids
}

// EncodeText returns the ids of text with added-token matching off: "<|im_end|>" in it is
// the characters '<', '|', 'i'... and never the control token. Chat content is encoded
// this way, so that only the template can emit control tokens.
func (t *Tokenizer) EncodeText(text string) []int32 {
	ids, _ := t.AppendText(nil, text, -1)
	return ids
}

// AppendEncode appends the ids of text (added tokens matched, as Encode) to dst. With
// limit >= 0 it stops once dst would hold more than limit ids and reports false: the
// text does not fit, and the work done on it is bounded by the limit, not by the text.
func (t *Tokenizer) AppendEncode(dst []int32, text string, limit int) ([]int32, bool) {
	for len(text) > 0 {
		start, end, id := t.matcher.find(text)
		if start < 0 {
			return t.AppendText(dst, text, limit)
		}
		var ok bool
		if dst, ok = t.AppendText(dst, text[:start], limit); !ok {
			return dst, false
		}
		if limit >= 0 && len(dst) >= limit {
			return dst, false
		}
		dst = append(dst, id)
		text = text[end:]
	}
	return dst, true
}

// AppendText appends the ids of text with added-token matching off (as EncodeText) to
// dst, with the limit of AppendEncode.
func (t *Tokenizer) AppendText(dst []int32, text string, limit int) ([]int32, bool) {
	if text == "" {
		return dst, true
	}
	if norm.NFC.QuickSpanString(text) != len(text) {
		text = norm.NFC.String(text)
	}
	if limit >= 0 && len(dst)+len(text)/t.maxTokenBytes > limit {
		// No token is longer than maxTokenBytes, so the text has at least
		// len/maxTokenBytes ids and cannot fit: no need to split or merge it.
		return dst, false
	}
	ok := true
	t.splitter.splitWhile(text, func(piece string) bool {
		if limit >= 0 && len(dst)+len(piece)/t.maxTokenBytes > limit {
			ok = false
			return false
		}
		dst = t.bpe.encode(dst, piece)
		if limit >= 0 && len(dst) > limit {
			ok = false
		}
		return ok
	})
	return dst, ok
}

// FindAdded returns the byte range and id of the first added token in s (leftmost, longest
// at that position), or start -1. Callers that assemble a prompt from trusted template text
// and untrusted content use it to tokenize the template's own control tokens.
func (t *Tokenizer) FindAdded(s string) (start, end int, id int32) {
	return t.matcher.find(s)
}

// AddedTokens lists the text of every added token (control tokens such as "<|im_end|>",
// and the non-special markers such as "<think>"), longest first.
func (t *Tokenizer) AddedTokens() []string {
	out := make([]string, 0, len(t.added))
	for content := range t.added {
		out = append(out, content)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// Decode turns ids back into text (the ByteLevel decoder; invalid UTF-8 becomes U+FFFD as
// in Hugging Face). Ids outside the vocabulary are skipped, as Hugging Face does.
func (t *Tokenizer) Decode(ids []int32) string {
	buf := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		buf = append(buf, t.tokenBytes(id)...)
	}
	return lossyUTF8(buf)
}

// TokenBytes returns the bytes id decodes to (nil outside the vocabulary); a token may
// hold part of a UTF-8 character.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	return append([]byte(nil), t.tokenBytes(id)...)
}

func (t *Tokenizer) tokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.idBytes) {
		return nil
	}
	return t.idBytes[id]
}

// TokenID returns the id of a token given by its text form: an added token's content
// ("<|im_end|>") or a vocabulary entry in byte-level form ("Ċ").
func (t *Tokenizer) TokenID(tok string) (int32, bool) {
	if id, ok := t.added[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// Token returns the text form of id ("" and false when unused).
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.idToken) || t.idToken[id] == "" {
		return "", false
	}
	return t.idToken[id], true
}

// IsSpecial reports whether id is an added token flagged special (e.g. <|im_end|>, but
// not <think> or <tool_call>).
func (t *Tokenizer) IsSpecial(id int32) bool {
	return t.addedByID[id].special
}

// IsAdded reports whether id is an added token (special or not).
func (t *Tokenizer) IsAdded(id int32) bool {
	_, ok := t.addedByID[id]
	return ok
}

// VocabSize is one more than the largest id (vocabulary and added tokens); the model's
// embedding may be padded beyond it.
func (t *Tokenizer) VocabSize() int { return int(t.maxID) + 1 }

// addedMatcher finds added tokens in raw text, leftmost first and longest at a position
// (Hugging Face's LeftmostLongest Aho-Corasick). Tokens are grouped by first byte; added
// token sets are small, so a per-byte candidate list is as fast as an automaton.
type addedMatcher struct {
	firsts  int               // number of distinct first bytes
	first   byte              // the first byte when there is only one (Qwen: '<')
	isFirst [256]bool         // bytes that start some added token
	byFirst [256][]addedEntry // longest first
}

type addedEntry struct {
	content string
	id      int32
}

func newAddedMatcher(added map[string]int32) addedMatcher {
	var m addedMatcher
	for content, id := range added {
		c := content[0]
		if !m.isFirst[c] {
			m.firsts++
			m.first = c
		}
		m.isFirst[c] = true
		m.byFirst[c] = append(m.byFirst[c], addedEntry{content, id})
	}
	for c := range m.byFirst {
		sort.Slice(m.byFirst[c], func(i, j int) bool {
			a, b := m.byFirst[c][i], m.byFirst[c][j]
			if len(a.content) != len(b.content) {
				return len(a.content) > len(b.content)
			}
			return a.content < b.content
		})
	}
	return m
}

// find returns the byte range and id of the first added token in s, or start -1.
func (m *addedMatcher) find(s string) (start, end int, id int32) {
	for pos := 0; pos < len(s); pos++ {
		switch m.firsts {
		case 0:
			return -1, -1, 0
		case 1: // the usual case: a vectorised scan for the one first byte
			i := strings.IndexByte(s[pos:], m.first)
			if i < 0 {
				return -1, -1, 0
			}
			pos += i
		default:
			if !m.isFirst[s[pos]] {
				continue
			}
		}
		for _, e := range m.byFirst[s[pos]] {
			if strings.HasPrefix(s[pos:], e.content) {
				return pos, pos + len(e.content), e.id
			}
		}
	}
	return -1, -1, 0
}
