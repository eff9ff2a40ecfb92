package constrain

import (
	"errors"
	"fmt"
)

// The grammar is a nondeterministic automaton over bytes and a few whole-token symbols
// (end of turn, <tool_call>, </tool_call>), built in continuation-passing style: a
// fragment is given the node to continue at and returns its own entry node, so
// concatenation is composition and loops close on a node allocated before its body.
// JSON strings are one parametric node (strNode) instead of a chain per character, so a
// maxLength of 10,000 costs one node, and the engine can recognise "free string content"
// states and answer them from precomputed token sets.

type nodeKind uint8

const (
	nByte  nodeKind = iota // one byte in [lo, hi], then next
	nSplit                 // epsilon to each of outs
	nSym                   // one whole token of symbol sym, then next
	nStr                   // string content with a counter, closed by its terminator, then next
	nDone                  // generation is over (after the end-of-turn symbol)
)

// Symbols are whole tokens the grammar names instead of spelling: the added tokens are
// not in the byte trie, so only these nodes produce them.
const (
	symEnd = iota // any end-of-turn token
	symToolCallOpen
	symToolCallClose
	numSyms
)

// String modes: what may appear raw in the content and what ends it.
const (
	modeJSON     = iota // a JSON string: closed by '"', escapes with '\'
	modeJSONTool        // a JSON string inside a tool-call parameter: also no "</" or "<p"
	modeRaw             // a raw tool-call string parameter: closed by '\n', no "</" or "<p"
	numModes
)

type strSpec struct {
	min, max int // max -1: unbounded
	mode     uint8
}

type node struct {
	kind   nodeKind
	lo, hi byte
	sym    uint8
	next   int32
	outs   []int32
	str    strSpec
}

// maxNodes bounds the automaton one schema may compile to.
const maxNodes = 1 << 20

var errTooLarge = errors.New("the schema compiles to more than a million grammar states; simplify it (fewer nested copies, smaller maxItems)")

type builder struct {
	nodes []node
	err   error
}

func (b *builder) add(n node) int32 {
	if len(b.nodes) >= maxNodes {
		b.err = errTooLarge
		return 0
	}
	b.nodes = append(b.nodes, n)
	return int32(len(b.nodes) - 1)
}

// frag builds a piece of grammar that continues at next and returns its entry.
type frag func(b *builder, next int32) int32

func byteRange(lo, hi byte) frag {
	return func(b *builder, next int32) int32 { return b.add(node{kind: nByte, lo: lo, hi: hi, next: next}) }
}

func lit(s string) frag {
	return func(b *builder, next int32) int32 {
		for i := len(s) - 1; i >= 0; i-- {
			next = b.add(node{kind: nByte, lo: s[i], hi: s[i], next: next})
		}
		return next
	}
}

func sym(k uint8) frag {
	return func(b *builder, next int32) int32 { return b.add(node{kind: nSym, sym: k, next: next}) }
}

func str(spec strSpec) frag {
	return func(b *builder, next int32) int32 { return b.add(node{kind: nStr, str: spec, next: next}) }
}

func seq(fs ...frag) frag {
	return func(b *builder, next int32) int32 {
		for i := len(fs) - 1; i >= 0; i-- {
			next = fs[i](b, next)
		}
		return next
	}
}

func empty() frag { return func(b *builder, next int32) int32 { return next } }

func alt(fs ...frag) frag {
	if len(fs) == 1 {
		return fs[0]
	}
	return func(b *builder, next int32) int32 {
		outs := make([]int32, len(fs))
		for i, f := range fs {
			outs[i] = f(b, next)
		}
		return b.add(node{kind: nSplit, outs: outs})
	}
}

func opt(f frag) frag { return alt(f, empty()) }

// class is one byte from a set of ranges, given as pairs.
func class(ranges ...byte) frag {
	fs := make([]frag, 0, len(ranges)/2)
	for i := 0; i+1 < len(ranges); i += 2 {
		fs = append(fs, byteRange(ranges[i], ranges[i+1]))
	}
	return alt(fs...)
}

// repeat is f between min and max times (max -1: unbounded).
func repeat(f frag, min, max int) frag {
	return func(b *builder, next int32) int32 {
		tail := next
		if max < 0 {
			// loop: after each extra copy, either another or leave
			loop := b.add(node{kind: nSplit})
			body := f(b, loop)
			if b.err != nil {
				return 0
			}
			b.nodes[loop].outs = []int32{body, next}
			tail = loop
		} else {
			for i := 0; i < max-min; i++ {
				body := f(b, tail)
				tail = b.add(node{kind: nSplit, outs: []int32{body, next}})
			}
		}
		for i := 0; i < min; i++ {
			tail = f(b, tail)
		}
		return tail
	}
}

func (b *builder) check() error {
	if b.err != nil {
		return b.err
	}
	for i, n := range b.nodes {
		if n.kind == nSplit && n.outs == nil {
			return fmt.Errorf("internal: split node %d was never closed", i)
		}
	}
	return nil
}
