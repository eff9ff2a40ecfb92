package constrain

import (
	"encoding/binary"
	"math"
	"slices"
)

// The automaton is determinised lazily: a state is the set of automaton positions
// (node, string counter) reachable after the bytes so far, created the first time a
// transition reaches it and kept with its transitions, so the trie walks of later masks
// mostly follow memoised edges.

// String content sub-states: inside a UTF-8 character, an escape, or after '<'.
const (
	subNormal = iota
	subCont1  // one continuation byte 80-BF left
	subCont2  // two left
	subE0     // after E0: A0-BF, then one
	subED     // after ED: 80-9F (no surrogates), then one
	subF0     // after F0: 90-BF, then two
	subCont3  // after F1-F3: three left
	subF4     // after F4: 80-8F, then two
	subEscape // after '\'
	subHex4   // \u and four hex digits left (the first may not be d: no surrogates)
	subHex3
	subHex2
	subHex1
	subAfterLT // after '<' in tool text: not '/' nor 'p' (the parser's </parameter>, <parameter=)
)

var pendingBytes = [...]int32{subNormal: 0, subCont1: 1, subCont2: 2, subE0: 2, subED: 2, subF0: 3, subCont3: 3, subF4: 3,
	subEscape: 1, subHex4: 4, subHex3: 3, subHex2: 2, subHex1: 1, subAfterLT: 0}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// strStep advances string content (param = count<<8 | sub) by one byte: stay in the
// string with a new param, close it (the byte was its terminator), or neither (reject).
func strStep(sp strSpec, param int32, c byte) (np int32, stay, close bool) {
	count, sub := param>>8, param&0xff
	char := func(nextSub int32) (int32, bool, bool) {
		if sp.max >= 0 && int(count) >= sp.max {
			return 0, false, false
		}
		count++
		if sp.max < 0 && int(count) > sp.min {
			count = int32(sp.min) // beyond the minimum only "enough" matters: keep states few
		}
		return count<<8 | nextSub, true, false
	}
	cont := func(lo, hi byte, nextSub int32) (int32, bool, bool) {
		if c < lo || c > hi {
			return 0, false, false
		}
		return count<<8 | nextSub, true, false
	}
	switch sub {
	case subCont1:
		return cont(0x80, 0xBF, subNormal)
	case subCont2:
		return cont(0x80, 0xBF, subCont1)
	case subE0:
		return cont(0xA0, 0xBF, subCont1)
	case subED:
		return cont(0x80, 0x9F, subCont1)
	case subF0:
		return cont(0x90, 0xBF, subCont2)
	case subCont3:
		return cont(0x80, 0xBF, subCont2)
	case subF4:
		return cont(0x80, 0x8F, subCont2)
	case subEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			return count<<8 | subNormal, true, false
		case 'u':
			return count<<8 | subHex4, true, false
		}
		return 0, false, false
	case subHex4:
		if !isHex(c) || c == 'd' || c == 'D' {
			return 0, false, false
		}
		return count<<8 | subHex3, true, false
	case subHex3, subHex2, subHex1:
		if !isHex(c) {
			return 0, false, false
		}
		return count<<8 | (sub + 1), true, false
	case subAfterLT:
		if c == '/' || c == 'p' {
			return 0, false, false
		}
	}
	// at a character boundary
	switch {
	case sp.mode != modeRaw && c == '"', sp.mode == modeRaw && c == '\n':
		if int(count) < sp.min {
			return 0, false, false
		}
		return 0, false, true
	case sp.mode != modeRaw && c == '\\':
		return char(subEscape)
	case sp.mode != modeJSON && c == '<':
		return char(subAfterLT)
	case c < 0x20:
		return 0, false, false
	case c < 0x80:
		return char(subNormal)
	case c >= 0xC2 && c <= 0xDF:
		return char(subCont1)
	case c == 0xE0:
		return char(subE0)
	case c == 0xED:
		return char(subED)
	case c >= 0xE1 && c <= 0xEF:
		return char(subCont2)
	case c == 0xF0:
		return char(subF0)
	case c >= 0xF1 && c <= 0xF3:
		return char(subCont3)
	case c == 0xF4:
		return char(subF4)
	}
	return 0, false, false
}

const (
	unknown = -2
	dead    = -1
)

type dstate struct {
	pos  []uint64 // node<<32 | param, sorted
	next [256]int32
	syms [numSyms]int32
	dist int32 // fewest tokens to the end (bytes and symbols, each at most one token)
	done bool

	// fast: the state is one free-string position at a character boundary.
	fast     bool
	str      strSpec
	count    int32
	tailDist int32 // dist after the terminator, plus the terminator

	mask        []uint64 // every token allowed here, ignoring the budget (nil: not yet)
	maskMaxDist int32    // the largest dist any of them leads to
}

// automaton is a grammar's nodes with its lazily built states.
type automaton struct {
	nodes    []node
	nodeDist []int32
	states   []*dstate
	index    map[string]int32
	start    int32
	masks    int // states holding a cached mask
}

// maxCachedMasks bounds the masks one generation keeps (31 KB each for the Qwen vocabulary):
// the states that repeat (free strings, structure) are few.
const maxCachedMasks = 256

func newAutomaton(nodes []node, entry int32) *automaton {
	a := &automaton{nodes: nodes, index: map[string]int32{}}
	a.computeDist()
	a.start = a.intern(a.closure([]uint64{uint64(entry) << 32}))
	return a
}

const inf = math.MaxInt32 / 4

// computeDist relaxes the fewest-tokens-to-done distance of every node to a fixed point.
func (a *automaton) computeDist() {
	d := make([]int32, len(a.nodes))
	for i := range d {
		d[i] = inf
	}
	for changed := true; changed; {
		changed = false
		for i, n := range a.nodes {
			v := int32(inf)
			switch n.kind {
			case nDone:
				v = 0
			case nByte, nSym:
				v = d[n.next] + 1
			case nStr:
				v = d[n.next] + int32(n.str.min) + 1
			case nSplit:
				for _, o := range n.outs {
					v = min(v, d[o])
				}
			}
			if v > inf {
				v = inf
			}
			if v < d[i] {
				d[i] = v
				changed = true
			}
		}
	}
	a.nodeDist = d
}

func (a *automaton) posDist(p uint64) int32 {
	n := &a.nodes[p>>32]
	if n.kind != nStr {
		return a.nodeDist[p>>32]
	}
	param := int32(uint32(p))
	need := max(0, int32(n.str.min)-param>>8)
	return need + pendingBytes[param&0xff] + 1 + a.nodeDist[n.next]
}

// closure expands splits; the result holds only consuming positions, sorted, unique.
func (a *automaton) closure(seeds []uint64) []uint64 {
	var out []uint64
	stack := append([]uint64(nil), seeds...)
	var seen []uint64 // split positions expanded; sets are small
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if slices.Contains(seen, p) {
			continue
		}
		seen = append(seen, p)
		n := &a.nodes[p>>32]
		if n.kind == nSplit {
			for _, o := range n.outs {
				stack = append(stack, uint64(o)<<32)
			}
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (a *automaton) intern(pos []uint64) int32 {
	if len(pos) == 0 {
		return dead
	}
	key := make([]byte, 8*len(pos))
	for i, p := range pos {
		binary.LittleEndian.PutUint64(key[8*i:], p)
	}
	if id, ok := a.index[string(key)]; ok {
		return id
	}
	s := &dstate{pos: pos, dist: inf}
	for i := range s.next {
		s.next[i] = unknown
	}
	for i := range s.syms {
		s.syms[i] = unknown
	}
	for _, p := range pos {
		s.dist = min(s.dist, a.posDist(p))
		if a.nodes[p>>32].kind == nDone {
			s.done = true
		}
	}
	if len(pos) == 1 {
		n := &a.nodes[pos[0]>>32]
		param := int32(uint32(pos[0]))
		if n.kind == nStr && param&0xff == subNormal {
			s.fast, s.str, s.count = true, n.str, param>>8
			s.tailDist = 1 + a.nodeDist[n.next]
		}
	}
	id := int32(len(a.states))
	a.states = append(a.states, s)
	a.index[string(key)] = id
	return id
}

// afterString is the state after the terminator of the free string that fast state is in
// (the same whatever its count).
func (a *automaton) afterString(state int32) int32 {
	n := &a.nodes[a.states[state].pos[0]>>32]
	return a.intern(a.closure([]uint64{uint64(n.next) << 32}))
}

// step is the state after byte c (dead: none).
func (a *automaton) step(state int32, c byte) int32 {
	s := a.states[state]
	if t := s.next[c]; t != unknown {
		return t
	}
	var seeds []uint64
	for _, p := range s.pos {
		n := &a.nodes[p>>32]
		switch n.kind {
		case nByte:
			if c >= n.lo && c <= n.hi {
				seeds = append(seeds, uint64(n.next)<<32)
			}
		case nStr:
			np, stay, closed := strStep(n.str, int32(uint32(p)), c)
			if stay {
				seeds = append(seeds, p&^0xffffffff|uint64(uint32(np)))
			} else if closed {
				seeds = append(seeds, uint64(n.next)<<32)
			}
		}
	}
	t := a.intern(a.closure(seeds))
	s.next[c] = t
	return t
}

// stepSym is the state after a token of symbol k (dead: none).
func (a *automaton) stepSym(state int32, k int) int32 {
	s := a.states[state]
	if t := s.syms[k]; t != unknown {
		return t
	}
	var seeds []uint64
	for _, p := range s.pos {
		n := &a.nodes[p>>32]
		if n.kind == nSym && int(n.sym) == k {
			seeds = append(seeds, uint64(n.next)<<32)
		}
	}
	t := a.intern(a.closure(seeds))
	s.syms[k] = t
	return t
}

func (a *automaton) stepBytes(state int32, b []byte) int32 {
	for _, c := range b {
		if state = a.step(state, c); state < 0 {
			return dead
		}
	}
	return state
}
