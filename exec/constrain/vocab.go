package constrain

import (
	"fmt"
	"sort"

	"pistil/models/tokenizer"
)

// Vocab is what the engine precomputes from a tokenizer, once per model: every token's
// bytes, a trie over them (a mask walks the trie against the automaton, so a byte that
// fails prunes every token that starts with it), and for each string mode the tokens that
// are plain string content, bucketed by how many characters they add, so a state inside a
// free string answers from a bitset instead of walking 248,320 tokens.
type Vocab struct {
	size   int // mask length: the model's logits (may exceed the tokenizer's ids)
	tokens [][]byte

	// trie: node 0 is the root; node i's children are edges [edgeStart[i], edgeStart[i+1]).
	edgeStart []int32
	edgeByte  []byte
	edgeNode  []int32
	tokenAt   []int32           // token id ending at a node, -1 none
	dupes     map[int32][]int32 // further ids with the same bytes as tokenAt[node]

	syms [numSyms][]int32
	// ThinkClose is </think>, -1 when the tokenizer has none.
	thinkClose int32

	plain [numModes]plainIndex
	words int
}

// plainIndex buckets the tokens that are plain content of a string in one mode.
type plainIndex struct {
	// upTo[k]: tokens of whole characters only, that add at most k characters.
	upTo [][]uint64
	// long lists those that add more than maxBucket characters, with their counts.
	long      []int32
	longChars []int32
	// longest is the largest character count among them; longestUpTo[k] the largest one
	// not above k.
	longest     int
	longestUpTo []int32
	// partial lists plain tokens that end inside a UTF-8 character.
	partial []partialToken
	// special lists tokens with a terminator, escape or tag byte after a plain start.
	special []specialToken
}

type partialToken struct {
	id      int32
	chars   int32 // characters started, the unfinished one included
	pending int32 // continuation bytes still owed
}

type specialToken struct {
	id    int32
	chars int32 // whole characters before the special byte
	at    int32 // offset of the special byte
	// closes: the special byte is the string's terminator (the rest of the token runs
	// from the state after the string, the same for every count).
	closes bool
}

// maxBucket is the largest character count with its own bitset; longer plain tokens are
// found through chars.
const maxBucket = 48

// NewVocab indexes tok for masks of size entries (the model's vocabulary, at least the
// tokenizer's). endTokens are the tokens that end a turn (the grammar's last symbol).
func NewVocab(tok *tokenizer.Tokenizer, size int, endTokens []int32) (*Vocab, error) {
	if size < tok.VocabSize() {
		return nil, fmt.Errorf("constrain: mask size %d is below the tokenizer's %d ids", size, tok.VocabSize())
	}
	if len(endTokens) == 0 {
		return nil, fmt.Errorf("constrain: no end-of-turn token")
	}
	v := &Vocab{size: size, tokens: make([][]byte, size), dupes: map[int32][]int32{}, thinkClose: -1, words: (size + 63) / 64}
	for id := int32(0); int(id) < tok.VocabSize(); id++ {
		if tok.IsAdded(id) {
			continue // added tokens come only from symbols, never from spelled bytes
		}
		if b := tok.TokenBytes(id); len(b) > 0 {
			v.tokens[id] = b
		}
	}
	v.syms[symEnd] = append([]int32(nil), endTokens...)
	for k, name := range map[int]string{symToolCallOpen: "<tool_call>", symToolCallClose: "</tool_call>"} {
		if id, ok := tok.TokenID(name); ok {
			v.syms[k] = []int32{id}
		}
	}
	if id, ok := tok.TokenID("</think>"); ok {
		v.thinkClose = id
	}
	v.buildTrie()
	for m := 0; m < numModes; m++ {
		v.plain[m] = v.indexPlain(uint8(m))
	}
	return v, nil
}

// Size is the mask length.
func (v *Vocab) Size() int { return v.size }

func (v *Vocab) buildTrie() {
	ids := make([]int32, 0, len(v.tokens))
	for id, b := range v.tokens {
		if b != nil {
			ids = append(ids, int32(id))
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := v.tokens[ids[i]], v.tokens[ids[j]]
		if c := string(a) < string(b); c || string(a) > string(b) {
			return c
		}
		return ids[i] < ids[j]
	})
	// Build with child lists, then flatten them into contiguous edges.
	type tnode struct {
		bytes    []byte
		children []int32
	}
	nodes := []tnode{{}}
	tokenAt := []int32{-1}
	path := []int32{0} // path[d]: node at depth d along the previous token
	var prev []byte
	for _, id := range ids {
		b := v.tokens[id]
		common := 0
		for common < len(prev) && common < len(b) && prev[common] == b[common] {
			common++
		}
		path = path[:common+1]
		for d := common; d < len(b); d++ {
			nodes = append(nodes, tnode{})
			tokenAt = append(tokenAt, -1)
			child := int32(len(nodes) - 1)
			parent := path[d]
			nodes[parent].children = append(nodes[parent].children, child)
			nodes[parent].bytes = append(nodes[parent].bytes, b[d])
			path = append(path, child)
		}
		end := path[len(b)]
		if tokenAt[end] < 0 {
			tokenAt[end] = id
		} else {
			v.dupes[end] = append(v.dupes[end], id)
		}
		prev = b
	}
	v.tokenAt = tokenAt
	v.edgeStart = make([]int32, len(nodes)+1)
	for i, n := range nodes {
		v.edgeStart[i+1] = v.edgeStart[i] + int32(len(n.children))
	}
	v.edgeByte = make([]byte, v.edgeStart[len(nodes)])
	v.edgeNode = make([]int32, v.edgeStart[len(nodes)])
	for i, n := range nodes {
		copy(v.edgeByte[v.edgeStart[i]:], n.bytes)
		copy(v.edgeNode[v.edgeStart[i]:], n.children)
	}
}

func (v *Vocab) indexPlain(mode uint8) plainIndex {
	spec := strSpec{min: 0, max: -1, mode: mode}
	var px plainIndex
	counts := make([]int, v.size)
	for id, b := range v.tokens {
		if b == nil {
			continue
		}
		chars, sub, ok, at := plainRun(spec, b)
		switch {
		case at >= 0:
			closes := b[at] == '"' && mode != modeRaw || b[at] == '\n' && mode == modeRaw
			px.special = append(px.special, specialToken{id: int32(id), chars: int32(chars), at: int32(at), closes: closes})
		case !ok:
		case sub != subNormal:
			px.partial = append(px.partial, partialToken{id: int32(id), chars: int32(chars), pending: pendingBytes[sub]})
		default:
			counts[id] = chars
			px.longest = max(px.longest, chars)
			if chars > maxBucket {
				px.long = append(px.long, int32(id))
				px.longChars = append(px.longChars, int32(chars))
			}
		}
	}
	px.longestUpTo = make([]int32, px.longest+1)
	for _, n := range counts {
		if n > 0 {
			px.longestUpTo[n] = int32(n)
		}
	}
	for k := 1; k <= px.longest; k++ {
		px.longestUpTo[k] = max(px.longestUpTo[k], px.longestUpTo[k-1])
	}
	px.upTo = make([][]uint64, maxBucket+1)
	for k := range px.upTo {
		px.upTo[k] = make([]uint64, v.words)
	}
	for id, n := range counts {
		if n == 0 {
			continue
		}
		for k := min(n, maxBucket+1); k <= maxBucket; k++ {
			px.upTo[k][id/64] |= 1 << (id % 64)
		}
	}
	return px
}

// plainRun runs a token's bytes through free string content from a character boundary.
// ok: all plain (chars started, sub where it ends); at >= 0: a non-plain byte
// (terminator, escape, tag) at that offset follows chars whole characters, so the rest
// needs the automaton; neither: the token can never continue a string from a boundary.
func plainRun(spec strSpec, b []byte) (chars int, sub int32, ok bool, at int) {
	param := int32(0)
	for i, c := range b {
		if param&0xff == subNormal && !isPlain(spec.mode, c) {
			if c >= 0x20 || (spec.mode == modeRaw && c == '\n') {
				return chars, 0, false, i
			}
			return 0, 0, false, -1
		}
		np, stay, _ := strStep(spec, param, c)
		if !stay {
			return 0, 0, false, -1
		}
		if np&0xff == subNormal && param&0xff == subNormal || isLead(c) {
			chars++
		}
		param = np
	}
	return chars, param & 0xff, true, -1
}

func isLead(c byte) bool { return c >= 0xC2 && c <= 0xF4 }

// isPlain: a byte that, at a character boundary, is content and nothing else.
func isPlain(mode uint8, c byte) bool {
	if c < 0x20 || c == '<' && mode != modeJSON {
		return false
	}
	if mode != modeRaw && (c == '"' || c == '\\') {
		return false
	}
	return true
}
