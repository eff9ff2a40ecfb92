package chat

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Delta is one piece of parsed model output; exactly one field is set.
type Delta struct {
	Reasoning string
	Content   string
	ToolCall  *ToolCallDelta
}

// ToolCallDelta is a streamed piece of a tool call in OpenAI's streaming shape: the first
// delta of a call carries Index, ID and Name; later ones carry Arguments fragments whose
// concatenation is the call's arguments as a JSON object.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// ParserOptions configure a Parser.
type ParserOptions struct {
	// StartInReasoning: the prompt ended inside <think> (see PromptEndsInReasoning), so the
	// output is reasoning until </think>.
	StartInReasoning bool
	// ParseTools: turn <tool_call> blocks into ToolCall deltas instead of content.
	ParseTools bool
	// Tools, when given, are the request's tool definitions; a parameter declared
	// "type": "string" then stays a string even when its text parses as JSON ("007").
	Tools []json.RawMessage
	// NewID makes tool call ids; nil uses "call_" and 24 random hex digits.
	NewID func() string
}

type parserState int

const (
	stateStart     parserState = iota // before any output: a leading <think> opens reasoning
	stateReasoning                    // inside <think>
	stateContent                      // ordinary answer text
	stateToolCall                     // inside <tool_call>
)

// Parser splits streamed model output into reasoning, content and tool calls. Markers may
// arrive split across pushes: text that could be the start of a marker is held back until
// it resolves, so no marker text ever leaks into content.
type Parser struct {
	opts  ParserOptions
	state parserState
	buf   string // text received but not yet resolved
	out   []Delta

	reasoningStarted bool   // a reasoning character was emitted (leading newlines dropped before)
	heldNewlines     string // trailing reasoning newlines, dropped if </think> follows
	trimContentStart bool   // drop newlines that follow </think> or a tool call
	heldSpace        string // trailing content whitespace, dropped if a tool call follows

	call      *xmlCall // the tool call being parsed
	callCount int
	stringArg map[string]map[string]bool // function -> parameters declared as strings
}

// NewParser starts a parser for one response.
func NewParser(o ParserOptions) *Parser {
	p := &Parser{opts: o, state: stateStart}
	if o.StartInReasoning {
		p.state = stateReasoning
	}
	p.stringArg = stringParameters(o.Tools)
	return p
}

// Push feeds decoded text and returns what is now resolved.
func (p *Parser) Push(text string) []Delta {
	p.buf += text
	p.run(false)
	return p.take()
}

// Finish ends the response: held-back text is flushed as what it is (reasoning, content,
// or the tool call parsed as far as it got). A call left open by the end of generation
// never becomes content: with a name it is closed as a call with the arguments it got
// (as a call cut by a stop string is), without one it is dropped.
func (p *Parser) Finish() []Delta {
	p.run(true)
	switch p.state {
	case stateReasoning:
		p.emitReasoning(p.heldNewlines)
		p.heldNewlines = ""
	case stateToolCall:
		p.finishToolCall()
	}
	p.emitContent(p.heldSpace)
	p.heldSpace = ""
	if p.buf != "" {
		p.emitContent(p.buf)
		p.buf = ""
	}
	return p.take()
}

func (p *Parser) take() []Delta {
	out := p.out
	p.out = nil
	return out
}

// run advances the state machine over buf as far as the text allows.
func (p *Parser) run(final bool) {
	for {
		before := p.progress()
		switch p.state {
		case stateStart:
			p.start(final)
		case stateReasoning:
			p.reasoning(final)
		case stateContent:
			p.content(final)
		case stateToolCall:
			p.toolCall(final)
		}
		if p.progress() == before {
			return
		}
	}
}

// progressMark captures everything a step can change, so run knows when it is stuck
// waiting for more text.
type progressMark struct {
	buf                      int
	state                    parserState
	mode                     callMode
	started, inParam, closed bool
}

func (p *Parser) progress() progressMark {
	m := progressMark{buf: len(p.buf), state: p.state}
	if c := p.call; c != nil {
		m.mode, m.started, m.inParam, m.closed = c.mode, c.started, c.inParam, c.closed
	}
	return m
}

// start: a response that begins with <think> (templates whose prompt does not open it)
// is reasoning up to </think>.
func (p *Parser) start(final bool) {
	rest := strings.TrimLeft(p.buf, " \t\r\n")
	switch {
	case strings.HasPrefix(rest, thinkOpen):
		p.buf = rest[len(thinkOpen):]
		p.state = stateReasoning
	case !final && strings.HasPrefix(thinkOpen, rest):
		// still could be <think>; wait
	default:
		p.state = stateContent
	}
}

func (p *Parser) reasoning(final bool) {
	i, safe := findMarker(p.buf, thinkClose)
	if p.opts.ParseTools {
		// Qwen3.5/3.6 may open a tool call inside its reasoning without closing it first;
		// <tool_call> is one added token, so it is a call, not a mention, and it ends the
		// reasoning implicitly (as vLLM's Qwen3 reasoning parser treats it).
		j, callSafe := findMarker(p.buf, toolCallOpen)
		if j >= 0 && (i < 0 || j < i) {
			p.emitReasoning(p.buf[:j])
			p.heldNewlines = ""
			p.buf = p.buf[j:]
			p.state = stateContent
			return
		}
		if i < 0 {
			safe = min(safe, callSafe)
		}
	}
	if i >= 0 {
		p.emitReasoning(p.buf[:i])
		p.heldNewlines = "" // the template strips newlines before </think>
		p.buf = p.buf[i+len(thinkClose):]
		p.state = stateContent
		p.trimContentStart = true
		return
	}
	if final {
		safe = len(p.buf)
	}
	p.emitReasoning(p.buf[:safe])
	p.buf = p.buf[safe:]
}

// emitReasoning emits reasoning text, dropping leading whitespace and holding trailing
// whitespace until more text follows: the template renders reasoning trimmed, and the
// parser must not stream what the history will lack (whitespace before </think>, or
// before a tool call that ends the reasoning, is dropped).
func (p *Parser) emitReasoning(s string) {
	if !p.reasoningStarted {
		s = strings.TrimLeft(s, spaces)
	}
	if s == "" {
		return
	}
	body := strings.TrimRight(s, spaces)
	if body == "" {
		p.heldNewlines += s
		return
	}
	p.add(Delta{Reasoning: p.heldNewlines + body})
	p.heldNewlines = s[len(body):]
	p.reasoningStarted = true
}

func (p *Parser) content(final bool) {
	if p.trimContentStart {
		p.buf = strings.TrimLeft(p.buf, "\n")
		if p.buf == "" {
			return
		}
		p.trimContentStart = false
	}
	if !p.opts.ParseTools {
		p.emitContent(p.buf)
		p.buf = ""
		return
	}
	i, safe := findMarker(p.buf, toolCallOpen)
	if i >= 0 {
		// whitespace between the text and the call is the template's separator, not content
		before := p.buf[:i]
		body := strings.TrimRight(before, spaces)
		p.emitContentHeld(body)
		p.call = &xmlCall{}
		p.heldSpace = ""
		p.buf = p.buf[i+len(toolCallOpen):]
		p.state = stateToolCall
		return
	}
	if final {
		safe = len(p.buf)
	}
	p.emitContentHeld(p.buf[:safe])
	p.buf = p.buf[safe:]
}

// emitContentHeld emits content but holds its trailing whitespace until non-space text
// follows, so the separator before a tool call is not streamed.
func (p *Parser) emitContentHeld(s string) {
	body := strings.TrimRight(s, spaces)
	if body == "" {
		p.heldSpace += s
		return
	}
	p.emitContent(p.heldSpace + body)
	p.heldSpace = s[len(body):]
}

func (p *Parser) emitContent(s string) {
	if s != "" {
		p.add(Delta{Content: s})
	}
}

// add appends a delta, merging text into the previous delta of the same kind.
func (p *Parser) add(d Delta) {
	if n := len(p.out); n > 0 && d.ToolCall == nil {
		last := &p.out[n-1]
		switch {
		case d.Reasoning != "" && last.Reasoning != "":
			last.Reasoning += d.Reasoning
			return
		case d.Content != "" && last.Content != "":
			last.Content += d.Content
			return
		}
	}
	p.out = append(p.out, d)
}

// findMarker returns the index of marker in s (or -1) and, when absent, how much of s is
// safe to emit: all but the longest suffix that is a prefix of marker.
func findMarker(s, marker string) (index, safe int) {
	if i := strings.Index(s, marker); i >= 0 {
		return i, i
	}
	return -1, len(s) - partialSuffix(s, marker)
}

// partialSuffix is the length of the longest proper prefix of marker that ends s.
func partialSuffix(s, marker string) int {
	for n := min(len(marker)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, marker[:n]) {
			return n
		}
	}
	return 0
}

func (p *Parser) newID() string {
	if p.opts.NewID != nil {
		return p.opts.NewID()
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}
