package constrain

import (
	"errors"
	"fmt"
	"math/bits"
)

// Grammar is a compiled constraint: what the output must be, from its first constrained
// token to the end-of-turn token.
type Grammar struct {
	nodes []node
	entry int32
	// afterReasoning is the entry after </think>: the answer may start with the newlines
	// the model writes there (the chat parser drops them).
	afterReasoning int32
	// tool: the grammar is a tool call (it may also begin at a <tool_call> token the
	// model wrote inside its reasoning).
	tool bool
}

func newGrammar(root frag, tool bool) (*Grammar, error) {
	b := &builder{}
	done := b.add(node{kind: nDone})
	entry := root(b, sym(symEnd)(b, done))
	after := repeat(lit("\n"), 0, 2)(b, entry)
	if err := b.check(); err != nil {
		return nil, err
	}
	return &Grammar{nodes: b.nodes, entry: entry, afterReasoning: after, tool: tool}, nil
}

// CompileSchema compiles a JSON Schema document: the output is one JSON value that
// validates against it, then the end of the turn. A keyword the engine cannot honour is
// an *UnsupportedError naming it.
func CompileSchema(doc []byte) (*Grammar, error) {
	s, p, err := parseSchema(doc)
	if err != nil {
		return nil, err
	}
	c := &compiler{p: p, active: map[string]int{}, mode: modeJSON}
	f, err := c.value(s)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, errors.New("the schema admits no value the engine can generate (false, or recursion that never ends)")
	}
	return newGrammar(f, false)
}

// JSONObject is any JSON object (response_format json_object), nested up to a few levels.
func JSONObject() *Grammar {
	g, err := CompileSchema([]byte(`{"type":"object"}`))
	if err != nil {
		panic(err)
	}
	return g
}

// Matcher follows one generation through a grammar and computes each step's mask. It is
// not safe for concurrent use; each generation has its own.
type Matcher struct {
	v     *Vocab
	a     *automaton
	state int32
}

// NewMatcher starts a generation of g over v's tokens; afterReasoning starts it after
// </think>, where up to two newlines may come first.
func (g *Grammar) NewMatcher(v *Vocab, afterReasoning bool) (*Matcher, error) {
	for k := 1; k < numSyms; k++ {
		if len(v.syms[k]) == 0 && g.tool {
			return nil, errors.New("constrain: the tokenizer has no <tool_call> and </tool_call> tokens")
		}
	}
	entry := g.entry
	if afterReasoning {
		entry = g.afterReasoning
	}
	a := newAutomaton(g.nodes, entry)
	return &Matcher{v: v, a: a, state: a.start}, nil
}

// Done reports whether the end-of-turn token has been accepted.
func (m *Matcher) Done() bool { return m.state >= 0 && m.a.states[m.state].done }

// MinTokens is the fewest tokens that can complete the grammar from here, end token
// included.
func (m *Matcher) MinTokens() int { return int(m.a.states[m.state].dist) }

// Accept advances by one token; an error when the grammar does not allow it here.
func (m *Matcher) Accept(id int32) error {
	next := m.next(m.state, id)
	if next < 0 {
		return fmt.Errorf("constrain: token %d is not allowed here", id)
	}
	m.state = next
	return nil
}

// acceptSym advances over a symbol token (a <tool_call> the model opened inside its
// reasoning, where the grammar starts); false when the grammar does not allow it here.
func (m *Matcher) acceptSym(k int) bool {
	next := m.a.stepSym(m.state, k)
	if next < 0 {
		return false
	}
	m.state = next
	return true
}

func (m *Matcher) next(state int32, id int32) int32 {
	for k := 0; k < numSyms; k++ {
		for _, t := range m.v.syms[k] {
			if t == id {
				return m.a.stepSym(state, k)
			}
		}
	}
	if id < 0 || int(id) >= len(m.v.tokens) || m.v.tokens[id] == nil {
		return dead
	}
	return m.a.stepBytes(state, m.v.tokens[id])
}

// Mask sets in dst (Vocab.Size bits, as 64-bit words) the tokens allowed next, given
// that at most budget tokens may still be generated, this one included: a token is
// allowed only if the grammar can still be completed within the budget after it
// (counting a byte as a token, which bounds the tokens needed from above). When the
// budget is too small for any, the tokens that leave the least to write are allowed, so
// the output closes as soon as it can. It returns the number of tokens allowed.
func (m *Matcher) Mask(dst []uint64, budget int) int {
	s := m.a.states[m.state]
	limit := int32(min(budget-1, inf))
	if s.mask != nil && s.maskMaxDist <= limit {
		copy(dst, s.mask)
		return popcount(dst)
	}
	full := s.mask
	cache := full == nil && m.a.masks < maxCachedMasks
	if full == nil {
		full = make([]uint64, m.v.words)
	}
	maxDist, minDist := m.compute(s, full, dst, limit)
	if cache {
		s.mask, s.maskMaxDist = full, maxDist
		m.a.masks++
	}
	n := popcount(dst)
	if n == 0 && minDist < inf {
		m.compute(s, full, dst, minDist)
		n = popcount(dst)
	}
	if n == 0 { // cannot happen: minDist is some token's; but never answer an empty mask
		copy(dst, full)
		n = popcount(dst)
	}
	return n
}

// compute fills full with every allowed token and dst with those leading to a state at
// most limit from the end; it returns the largest and the smallest such distance.
func (m *Matcher) compute(s *dstate, full, dst []uint64, limit int32) (maxDist, minDist int32) {
	clear(dst)
	if s.fast {
		maxDist, minDist = m.fastMask(s, full, dst, limit)
	} else {
		maxDist, minDist = m.walk(m.state, full, dst, limit)
	}
	for k := 0; k < numSyms; k++ {
		t := m.a.stepSym(m.state, k)
		if t < 0 {
			continue
		}
		d := m.a.states[t].dist
		maxDist, minDist = max(maxDist, d), min(minDist, d)
		for _, id := range m.v.syms[k] {
			setBit(full, id)
			if d <= limit {
				setBit(dst, id)
			}
		}
	}
	return maxDist, minDist
}

func setBit(b []uint64, id int32) { b[id>>6] |= 1 << (uint(id) & 63) }

func popcount(b []uint64) int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// walk visits the trie depth first against the automaton: a byte the state rejects
// prunes every token below it.
func (m *Matcher) walk(state int32, full, dst []uint64, limit int32) (maxDist, minDist int32) {
	v, a := m.v, m.a
	type item struct{ node, state int32 }
	stack := make([]item, 0, 256)
	stack = append(stack, item{0, state})
	minDist = inf
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.node != 0 {
			if id := v.tokenAt[it.node]; id >= 0 {
				d := a.states[it.state].dist
				maxDist, minDist = max(maxDist, d), min(minDist, d)
				setBit(full, id)
				if d <= limit {
					setBit(dst, id)
				}
				for _, dup := range v.dupes[it.node] {
					setBit(full, dup)
					if d <= limit {
						setBit(dst, dup)
					}
				}
			}
		}
		next := &a.states[it.state].next
		for e := v.edgeStart[it.node]; e < v.edgeStart[it.node+1]; e++ {
			c := v.edgeByte[e]
			t := next[c]
			if t == unknown {
				t = a.step(it.state, c)
			}
			if t >= 0 {
				stack = append(stack, item{v.edgeNode[e], t})
			}
		}
	}
	return maxDist, minDist
}

// fastMask answers a free-string state: whole-character plain tokens come from the
// precomputed buckets (by how many characters they add, against maxLength and the
// budget), and only the listed tokens that end mid-character or hold a terminator,
// escape or tag byte are run through the automaton.
func (m *Matcher) fastMask(s *dstate, full, dst []uint64, limit int32) (maxDist, minDist int32) {
	px := &m.v.plain[s.str.mode]
	room := px.longest // characters the string may still take
	if s.str.max >= 0 {
		room = min(room, s.str.max-int(s.count))
	}
	need := max(0, s.str.min-int(s.count)) // characters still required
	minDist = inf
	if room > 0 {
		px.addUpTo(full, room)
		maxDist = int32(max(0, need-1)) + s.tailDist
		minDist = int32(max(0, need-int(px.longestUpTo[room]))) + s.tailDist
		// within the budget: need-n more characters, then the tail
		if slack := int(limit - s.tailDist); slack >= 0 {
			fewest := max(1, need-slack)
			if fewest <= room {
				px.addUpTo(dst, room)
				if fewest > 1 {
					px.removeUpTo(dst, fewest-1)
				}
			}
		}
	}
	allow := func(id int32, d int32) {
		maxDist, minDist = max(maxDist, d), min(minDist, d)
		setBit(full, id)
		if d <= limit {
			setBit(dst, id)
		}
	}
	for _, p := range px.partial {
		if int(p.chars) <= room {
			allow(p.id, int32(max(0, need-int(p.chars)))+p.pending+s.tailDist)
		}
	}
	afterClose := int32(dead)
	for _, sp := range px.special {
		if int(sp.chars) > room {
			continue
		}
		b := m.v.tokens[sp.id]
		var t int32
		if sp.closes {
			if int(sp.chars) < need {
				continue
			}
			if afterClose == dead {
				afterClose = m.a.afterString(m.state)
			}
			t = m.a.stepBytes(afterClose, b[sp.at+1:])
		} else {
			t = m.a.stepBytes(m.state, b)
		}
		if t >= 0 {
			allow(sp.id, m.a.states[t].dist)
		}
	}
	return maxDist, minDist
}

// addUpTo ORs in the plain tokens of at most k characters.
func (px *plainIndex) addUpTo(dst []uint64, k int) {
	if k <= maxBucket {
		orInto(dst, px.upTo[k])
		return
	}
	orInto(dst, px.upTo[maxBucket])
	for i, id := range px.long {
		if int(px.longChars[i]) <= k {
			setBit(dst, id)
		}
	}
}

// removeUpTo clears the plain tokens of at most k characters.
func (px *plainIndex) removeUpTo(dst []uint64, k int) {
	if k <= maxBucket {
		for i, w := range px.upTo[k] {
			dst[i] &^= w
		}
		return
	}
	for i, w := range px.upTo[maxBucket] {
		dst[i] &^= w
	}
	for i, id := range px.long {
		if int(px.longChars[i]) <= k {
			dst[id>>6] &^= 1 << (uint(id) & 63)
		}
	}
}

func orInto(dst, src []uint64) {
	for i, w := range src {
		dst[i] |= w
	}
}
