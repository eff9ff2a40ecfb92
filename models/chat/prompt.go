package chat

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"pistil/models/tokenizer"
)

// Prompt is a conversation rendered and tokenized for the model.
type Prompt struct {
	// Text is the rendered conversation: what Render returns for it (whole, also when
	// IDs stop early).
	Text string
	// IDs are its tokens. Control tokens (<|im_start|>, <|im_end|>, <think>, <tool_call>...)
	// appear only where the template's own text wrote them; the same characters inside a
	// message, a tool result, a tool's name or schema or the reasoning are ordinary text.
	IDs []int32
	// Complete is false when the prompt has more ids than the limit RenderPrompt was given;
	// IDs then stop early, and the rest was not tokenized.
	Complete bool
}

// RenderPrompt renders the conversation and tokenizes it so that its content can never
// become control tokens: a tool result holding "<|im_end|>\n<|im_start|>system" cannot close
// its turn and open a system turn of its own.
//
// How: every character that starts or ends an added token ('<' and '>' for Qwen) is
// replaced, in every string that comes from o, by a private-use character the input does
// not contain; the template is rendered; the added tokens it then holds are the template's
// own, and the text between them is put back and tokenized with added-token matching off.
// For content free of those characters the ids are exactly tok.Encode(Render(o)).
//
// What the template sees therefore differs from Render's input only in those characters:
// a template test on content for a control token ("'</think>' in content", "startswith(
// '<tool_response>')") finds none. The one such test a Qwen conversation relies on, the
// split of a think block out of an assistant's content, is done here first (see
// splitThinkBlocks), so its rendering is unchanged; a user message wrapping a relayed tool
// result in <tool_response> tags is treated as a user query.
//
// limit >= 0 stops tokenizing once the prompt has more than limit ids (Complete false).
func (t *Template) RenderPrompt(tok *tokenizer.Tokenizer, o RenderOptions, limit int) (Prompt, error) {
	var seen map[rune]bool
	for attempt := 0; ; attempt++ {
		esc, err := t.newEscaper(tok, seen)
		if err != nil {
			return Prompt{}, err
		}
		opts := o
		var keepLead []bool
		opts.Messages, keepLead = splitThinkBlocks(o.Messages)
		text, err := t.render(opts, esc, keepLead)
		if err != nil {
			return Prompt{}, err
		}
		if !esc.clash {
			return esc.tokenize(tok, text, limit), nil
		}
		if attempt > 0 {
			// The first pass saw every private-use character of the input, and the second
			// chose around them: a clash now is a bug, not an input.
			return Prompt{}, errors.New("chat prompt: placeholder characters clash with the input")
		}
		seen = esc.seen
	}
}

// escaper maps the boundary characters of added tokens to placeholders in untrusted
// strings and back. A nil *escaper leaves strings as they are.
type escaper struct {
	toPlaceholder map[rune]rune
	keep          rune // stands for nothing: it only stops the template trimming (see splitThinkBlocks)
	placeholders  map[rune]bool
	restore       *strings.Replacer

	// seen collects the private-use characters of the input; clash says one of them is a
	// placeholder of this escaper.
	seen  map[rune]bool
	clash bool
}

// Placeholders come from the Basic Multilingual Plane's private use area.
const (
	privateFirst = '\uE000'
	privateLast  = '\uF8FF'
)

func isPrivate(r rune) bool { return r >= privateFirst && r <= privateLast }

// newEscaper picks placeholders that neither the template, its special tokens, the added
// tokens nor the runes in exclude use.
func (t *Template) newEscaper(tok *tokenizer.Tokenizer, exclude map[rune]bool) (*escaper, error) {
	used := map[rune]bool{}
	note := func(s string) {
		for _, r := range s {
			if isPrivate(r) {
				used[r] = true
			}
		}
	}
	note(t.source)
	for _, v := range t.specials {
		note(v)
	}
	var boundaries []rune
	for _, a := range tok.AddedTokens() {
		note(a)
		first, _ := utf8.DecodeRuneInString(a)
		last, _ := utf8.DecodeLastRuneInString(a)
		for _, r := range []rune{first, last} {
			if !containsRune(boundaries, r) {
				boundaries = append(boundaries, r)
			}
		}
	}
	next := rune(privateFirst)
	pick := func() (rune, bool) {
		for ; next <= privateLast; next++ {
			if !used[next] && !exclude[next] {
				next++
				return next - 1, true
			}
		}
		return 0, false
	}
	e := &escaper{toPlaceholder: map[rune]rune{}, placeholders: map[rune]bool{}, seen: map[rune]bool{}}
	var pairs []string
	for _, b := range boundaries {
		p, ok := pick()
		if !ok {
			return nil, errors.New("chat prompt: the input uses every private-use character, so none is left to stand in for control-token characters")
		}
		e.toPlaceholder[b] = p
		e.placeholders[p] = true
		pairs = append(pairs, string(p), string(b))
	}
	keep, ok := pick()
	if !ok {
		return nil, errors.New("chat prompt: the input uses every private-use character, so none is left to stand in for control-token characters")
	}
	e.keep = keep
	e.placeholders[keep] = true
	pairs = append(pairs, string(keep), "")
	e.restore = strings.NewReplacer(pairs...)
	return e, nil
}

func containsRune(rs []rune, r rune) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// str returns s with its boundary characters replaced by placeholders.
func (e *escaper) str(s string) string {
	if e == nil {
		return s
	}
	need := false
	for _, r := range s {
		if isPrivate(r) {
			e.seen[r] = true
			if e.placeholders[r] {
				e.clash = true
			}
		}
		if _, ok := e.toPlaceholder[r]; ok {
			need = true
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/4)
	for _, r := range s {
		if p, ok := e.toPlaceholder[r]; ok {
			r = p
		}
		b.WriteRune(r)
	}
	return b.String()
}

// goValue escapes the strings (keys too) of a value built from JSON-like Go data.
func (e *escaper) goValue(v any) any {
	if e == nil {
		return v
	}
	switch v := v.(type) {
	case string:
		return e.str(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = e.goValue(x)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = e.str(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[e.str(k)] = e.goValue(x)
		}
		return out
	}
	return v
}

// tokenize turns rendered text into ids: added tokens found in it are the template's own
// (the input's boundary characters are placeholders); the text between them is restored
// and encoded with added-token matching off.
func (e *escaper) tokenize(tok *tokenizer.Tokenizer, rendered string, limit int) Prompt {
	text := rendered
	if hasPlaceholderBytes(rendered) {
		text = e.restore.Replace(rendered)
	}
	ids := make([]int32, 0, min(len(rendered)/3+16, max(limit, 0)+16))
	for len(rendered) > 0 {
		start, end, id := tok.FindAdded(rendered)
		segment := rendered
		if start >= 0 {
			segment = rendered[:start]
		}
		plain := segment
		if hasPlaceholderBytes(segment) {
			plain = e.restore.Replace(segment)
		}
		var ok bool
		if ids, ok = tok.AppendText(ids, plain, limit); !ok {
			return Prompt{Text: text, IDs: ids}
		}
		if start < 0 {
			break
		}
		if limit >= 0 && len(ids) >= limit {
			return Prompt{Text: text, IDs: ids}
		}
		ids = append(ids, id)
		rendered = rendered[end:]
	}
	return Prompt{Text: text, IDs: ids, Complete: true}
}

// hasPlaceholderBytes reports whether s may hold a placeholder: every character of
// U+E000-U+F8FF starts with byte EE or EF in UTF-8, and most text has neither.
func hasPlaceholderBytes(s string) bool {
	return strings.IndexByte(s, 0xEE) >= 0 || strings.IndexByte(s, 0xEF) >= 0
}

// splitThinkBlocks moves a think block out of an assistant message's content into its
// reasoning_content, exactly as the Qwen3, 3.5 and 3.6 templates do when a client sends the
// model's raw output back as content ("<think>\n...\n</think>\n\nanswer") and no
// reasoning_content: reasoning is the text between the last <think> before the first
// </think> and that </think>, content what follows the last </think>, newlines trimmed.
// The template then renders the same text, and the marker characters it no longer has to
// look for stay escaped like any other content.
//
// keepLead marks contents that start with spaces after the block: the Qwen3.6 template
// trims content that it would otherwise have split after trimming, so the escaper's keep
// marker goes in front to hold those spaces, and disappears when the text is restored.
func splitThinkBlocks(in []Message) ([]Message, []bool) {
	var out []Message
	var keepLead []bool
	for i := range in {
		m := &in[i]
		if m.Role != "assistant" || m.ReasoningContent != nil {
			continue
		}
		content, ok := textOnly(m.Content)
		if !ok || !strings.Contains(content, thinkClose) {
			continue
		}
		if out == nil {
			out = append([]Message(nil), in...)
			keepLead = make([]bool, len(in))
		}
		pieces := strings.Split(content, thinkClose)
		reasoning := strings.TrimRight(pieces[0], "\n")
		if j := strings.LastIndex(reasoning, thinkOpen); j >= 0 {
			reasoning = reasoning[j+len(thinkOpen):]
		}
		reasoning = strings.TrimLeft(reasoning, "\n")
		after := strings.TrimLeft(pieces[len(pieces)-1], "\n")
		out[i].Content = after
		out[i].ReasoningContent = &reasoning
		first, _ := utf8.DecodeRuneInString(after)
		keepLead[i] = unicode.IsSpace(first) && strings.TrimSpace(after) != ""
	}
	if out == nil {
		return in, nil
	}
	return out, keepLead
}

// textOnly is a content's text when it is a string or made only of text parts.
func textOnly(c any) (string, bool) {
	switch c := c.(type) {
	case string:
		return c, true
	case []ContentPart:
		var b strings.Builder
		for _, p := range c {
			if p.Type != "text" {
				return "", false
			}
			b.WriteString(p.Text)
		}
		return b.String(), true
	}
	return "", false
}
