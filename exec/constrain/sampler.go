package constrain

import (
	"math"
	"math/bits"
)

// Sampler is the engine's sampling seam: pick the next token from logits, given the
// tokens generated so far.
type Sampler interface {
	Sample(logits []float32, history []int32) int32
}

// Options place a constraint in a generation.
type Options struct {
	// MaxTokens is the generation's token limit; the constraint finishes the grammar
	// within it whenever the limit allows.
	MaxTokens int
	// Thinking: the output starts inside the reasoning block. It is free until </think>
	// (except that the turn may not end there), and constrained after it. When the
	// budget left falls to what the answer needs (a quarter of MaxTokens, at least
	// twice the shortest answer), </think> is forced.
	Thinking bool
}

// ConstrainedSampler applies a grammar to another sampler: disallowed tokens get
// -Inf logits before the inner sampler chooses, so temperature, top-k/p and penalties
// act on the allowed tokens only.
type ConstrainedSampler struct {
	inner   Sampler
	m       *Matcher
	tool    bool
	opts    Options
	started bool
	mask    []uint64
	scratch []float32
}

// NewSampler wraps inner with a matcher of g.
func NewSampler(inner Sampler, g *Grammar, v *Vocab, o Options) (*ConstrainedSampler, error) {
	m, err := g.NewMatcher(v, o.Thinking)
	if err != nil {
		return nil, err
	}
	return &ConstrainedSampler{inner: inner, m: m, tool: g.tool, opts: o, started: !o.Thinking || v.thinkClose < 0,
		mask: make([]uint64, v.words)}, nil
}

// Matcher is the sampler's matcher (Done tells whether the grammar completed).
func (c *ConstrainedSampler) Matcher() *Matcher { return c.m }

func (c *ConstrainedSampler) reserve() int {
	return max(2*c.m.MinTokens(), c.opts.MaxTokens/4)
}

// Sample picks the next token within the grammar.
func (c *ConstrainedSampler) Sample(logits []float32, history []int32) int32 {
	v := c.m.v
	budget := c.opts.MaxTokens - len(history)
	if len(c.scratch) < len(logits) {
		c.scratch = make([]float32, len(logits))
	}
	scratch := c.scratch[:len(logits)]
	if !c.started {
		if budget <= c.reserve() {
			c.started = true
			return v.thinkClose
		}
		copy(scratch, logits)
		for _, id := range v.syms[symEnd] {
			if int(id) < len(scratch) {
				scratch[id] = float32(math.Inf(-1))
			}
		}
		id := c.inner.Sample(scratch, history)
		switch {
		case id == v.thinkClose:
			c.started = true
		case c.tool && len(v.syms[symToolCallOpen]) > 0 && id == v.syms[symToolCallOpen][0]:
			// the chat parser ends the reasoning at a <tool_call>: so does the constraint
			c.started = c.m.acceptSym(symToolCallOpen)
		}
		return id
	}
	c.m.Mask(c.mask, budget)
	negInf := float32(math.Inf(-1))
	for i := range scratch {
		scratch[i] = negInf
	}
	first := int32(-1)
	for w, word := range c.mask {
		for word != 0 {
			id := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if id < len(logits) {
				scratch[id] = logits[id]
				if first < 0 {
					first = int32(id)
				}
			}
		}
	}
	id := c.inner.Sample(scratch, history)
	if c.m.Accept(id) != nil && first >= 0 {
		// every allowed logit was -Inf or NaN and the inner sampler fell back to a default
		id = first
		_ = c.m.Accept(id)
	}
	return id
}
