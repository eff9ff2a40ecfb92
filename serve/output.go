package serve

import (
	"strings"
)

// The output pipeline turns generated token ids into client-visible deltas:
//
//	token ids → stream decoder (whole UTF-8 characters only)
//	          → stop filter (text that could begin a stop string is held back)
//	          → parser (<think> to reasoning, <tool_call> to tool calls)
//	          → deltas
//
// Every stage holds back only what is not yet safe to emit and flushes it at the end
// through the stages after it, so streamed and non-streamed output are identical.

// outDelta is one piece of output for the client.
type outDelta struct {
	Reasoning string
	Content   string
	ToolCall  *toolCallDelta
	// Logprobs are the entries of the tokens generated since the previous delta that
	// carried some (the pipeline may hold a token's text back past later tokens).
	Logprobs []tokenLogprob
}

// toolCallDelta is a fragment of one tool call. The first fragment of each Index carries
// ID and Name; later ones carry argument text only.
type toolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// textDecoder is the tokenizer's stream decoder.
type textDecoder interface {
	Push(id int32) string
	Flush() string
}

// deltaParser splits raw model text into reasoning, content and tool calls.
type deltaParser interface {
	Push(text string) []outDelta
	Finish() []outDelta
}

// plainParser passes text through as content (the legacy completions endpoint).
type plainParser struct{}

func (plainParser) Push(text string) []outDelta {
	if text == "" {
		return nil
	}
	return []outDelta{{Content: text}}
}

func (plainParser) Finish() []outDelta { return nil }

// stopFilter releases text that cannot be part of a stop string and reports a match.
// held is the longest suffix of the text seen that is a proper prefix of some stop string;
// it is released as soon as the next text proves it is not one.
type stopFilter struct {
	stops   []string
	held    string
	matched bool
}

// push adds text and returns what may be released now. After a match it returns the
// text before the stop string and sets matched; everything later is dropped.
func (f *stopFilter) push(text string) string {
	if f.matched {
		return ""
	}
	if len(f.stops) == 0 {
		return text
	}
	buf := f.held + text
	cut := -1
	for _, s := range f.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		f.matched = true
		f.held = ""
		return buf[:cut]
	}
	hold := 0
	for _, s := range f.stops {
		// Longest proper prefix of s that ends buf.
		for n := min(len(s)-1, len(buf)); n > hold; n-- {
			if strings.HasSuffix(buf, s[:n]) {
				hold = n
				break
			}
		}
	}
	f.held = buf[len(buf)-hold:]
	return buf[:len(buf)-hold]
}

// flush releases what is still held (no stop string can complete any more).
func (f *stopFilter) flush() string {
	out := f.held
	f.held = ""
	if f.matched {
		return ""
	}
	return out
}

// pipeline is one request's output path.
type pipeline struct {
	dec    textDecoder
	stop   stopFilter
	parser deltaParser
}

func newPipeline(dec textDecoder, stops []string, parser deltaParser) *pipeline {
	return &pipeline{dec: dec, stop: stopFilter{stops: stops}, parser: parser}
}

// push feeds one generated token. It returns the deltas now safe to emit and whether a
// stop string matched (generation must end).
func (p *pipeline) push(id int32) ([]outDelta, bool) {
	text := p.stop.push(p.dec.Push(id))
	var out []outDelta
	if text != "" {
		out = p.parser.Push(text)
	}
	return out, p.stop.matched
}

// finish flushes every stage. It is called once, after the last token.
func (p *pipeline) finish() []outDelta {
	var out []outDelta
	if !p.stop.matched {
		if text := p.stop.push(p.dec.Flush()); text != "" {
			out = append(out, p.parser.Push(text)...)
		}
		if text := p.stop.flush(); text != "" {
			out = append(out, p.parser.Push(text)...)
		}
	}
	return append(out, p.parser.Finish()...)
}
