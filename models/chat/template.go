package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"

	"pistil/internal/regularfile"
)

// maxConfigBytes bounds chat_template.jinja and tokenizer_config.json (a few kB to a few
// hundred kB in practice).
const maxConfigBytes = 16 << 20

// Template is a compiled chat template. The Jinja engine is github.com/ardanlabs/jinja: a
// pure-Go engine built for LLM chat templates that applies transformers' environment
// (trim_blocks, lstrip_blocks, loop controls, namespace, Python string methods,
// raise_exception, tojson with ensure_ascii=False and Python separators) and keeps dict
// insertion order, and which renders the Qwen3, 3.5 and 3.6 templates byte-exactly.
//
// Known differences from Python's Jinja2 in that engine, none of which the Qwen templates
// meet with ordinary requests: a float with an integral value prints as "3" (Python
// "3.0"), none|string is "" (Python "None"), |trim keeps \x1c-\x1f, and tojson escapes
// U+2028/U+2029.
type Template struct {
	source string
	tmpl   *jinja.Template
	// special token strings from tokenizer_config.json, passed to the template the way
	// transformers passes its special_tokens_map
	specials map[string]string
}

// LoadTemplate reads the chat template of a checkpoint or tokenizer directory:
// chat_template.jinja when present, else tokenizer_config.json's chat_template (a string,
// or a list of named templates of which "default" is used).
func LoadTemplate(dir string) (*Template, error) {
	cfg, cfgErr := readTokenizerConfig(dir)
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if src, err := regularfile.Read(jinjaPath, maxConfigBytes); err == nil {
		return newTemplate(string(src), cfg.specials, jinjaPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	if cfgErr != nil {
		return nil, fmt.Errorf("chat template: no chat_template.jinja and %w", cfgErr)
	}
	if cfg.template == "" {
		return nil, fmt.Errorf("chat template: %s has no chat_template and there is no chat_template.jinja", filepath.Join(dir, "tokenizer_config.json"))
	}
	return newTemplate(cfg.template, cfg.specials, filepath.Join(dir, "tokenizer_config.json"))
}

// ParseTemplate compiles template source text.
func ParseTemplate(source string) (*Template, error) {
	return newTemplate(source, nil, "template")
}

func newTemplate(source string, specials map[string]string, origin string) (*Template, error) {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s: %w", origin, err)
	}
	return &Template{source: source, tmpl: tmpl, specials: specials}, nil
}

// Source is the template text.
func (t *Template) Source() string { return t.source }

type tokenizerConfig struct {
	template string
	specials map[string]string
}

func readTokenizerConfig(dir string) (tokenizerConfig, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := regularfile.Read(path, maxConfigBytes)
	if err != nil {
		return tokenizerConfig{}, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return tokenizerConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	cfg := tokenizerConfig{specials: map[string]string{}}
	for _, name := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
		var s string
		if json.Unmarshal(raw[name], &s) == nil && s != "" {
			cfg.specials[name] = s
		}
	}
	if ct, ok := raw["chat_template"]; ok {
		if err := json.Unmarshal(ct, &cfg.template); err != nil {
			var named []struct{ Name, Template string }
			if err2 := json.Unmarshal(ct, &named); err2 != nil {
				return tokenizerConfig{}, fmt.Errorf("%s: chat_template is neither a string nor a list of named templates", path)
			}
			for _, n := range named {
				if n.Name == "default" {
					cfg.template = n.Template
				}
			}
			if cfg.template == "" {
				return tokenizerConfig{}, fmt.Errorf("%s: chat_template list has no \"default\" entry", path)
			}
		}
	}
	return cfg, nil
}

// RenderOptions are the inputs of apply_chat_template.
type RenderOptions struct {
	Messages            []Message
	Tools               []json.RawMessage // each an OpenAI tool object, rendered with its key order
	AddGenerationPrompt bool
	EnableThinking      *bool // nil: left undefined, the template's default
	PreserveThinking    *bool // nil: left undefined
	Extra               map[string]any
}

// Render renders the template. A template error (raise_exception or an evaluation error)
// is returned with the template line it comes from when that can be found.
//
// The text is what transformers' apply_chat_template returns; tokenizing it whole turns any
// control-token text inside the content into control tokens. RenderPrompt renders and
// tokenizes so that only the template's own text can.
func (t *Template) Render(o RenderOptions) (string, error) {
	return t.render(o, nil, nil)
}

// render renders with every string that comes from o passed through esc (nil: as is).
// keepLead marks messages whose content gets esc's keep marker in front (see
// splitThinkBlocks).
func (t *Template) render(o RenderOptions, esc *escaper, keepLead []bool) (string, error) {
	data := make(map[string]jinja.Value, 8+len(o.Extra))
	for k, v := range o.Extra {
		data[esc.str(k)] = jinja.FromGoValue(esc.goValue(v))
	}
	for k, v := range t.specials {
		data[k] = jinja.NewString(v)
	}
	msgs := make([]jinja.Value, len(o.Messages))
	for i := range o.Messages {
		v, err := messageValue(&o.Messages[i], esc, i < len(keepLead) && keepLead[i])
		if err != nil {
			return "", fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)
	if o.Tools != nil {
		tools := make([]jinja.Value, len(o.Tools))
		for i, raw := range o.Tools {
			v, err := jsonValue(raw, esc)
			if err != nil {
				return "", fmt.Errorf("tools[%d]: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	} else {
		data["tools"] = jinja.None()
	}
	data["add_generation_prompt"] = jinja.NewBool(o.AddGenerationPrompt)
	if o.EnableThinking != nil {
		data["enable_thinking"] = jinja.NewBool(*o.EnableThinking)
	}
	if o.PreserveThinking != nil {
		data["preserve_thinking"] = jinja.NewBool(*o.PreserveThinking)
	}
	out, err := t.tmpl.RenderValues(data)
	if err != nil {
		return "", t.renderError(err)
	}
	return out, nil
}

// renderError names the template line of a failure. The engine reports runtime errors
// without positions; raise_exception messages are literals in the source, so the line
// that raises them can be found there.
func (t *Template) renderError(err error) error {
	msg := err.Error()
	if line := t.lineOf(msg); line > 0 {
		return fmt.Errorf("chat template line %d: %s", line, msg)
	}
	return fmt.Errorf("chat template: %w", err)
}

func (t *Template) lineOf(msg string) int {
	if msg == "" {
		return 0
	}
	for i, line := range strings.Split(t.source, "\n") {
		if strings.Contains(line, "raise_exception") && strings.Contains(line, msg) {
			return i + 1
		}
	}
	return 0
}

// ThinkingByDefault reports whether the generation prompt of a plain conversation ends
// inside <think>, i.e. whether the model's output starts as reasoning when the request
// does not set enable_thinking.
func (t *Template) ThinkingByDefault() bool {
	prompt, err := t.Render(RenderOptions{
		Messages:            []Message{{Role: "user", Content: "hi"}},
		AddGenerationPrompt: true,
	})
	return err == nil && PromptEndsInReasoning(prompt)
}

// PromptEndsInReasoning reports whether a rendered prompt leaves the model inside an open
// <think> block (the parser must then start in reasoning).
func PromptEndsInReasoning(prompt string) bool {
	open := strings.LastIndex(prompt, thinkOpen)
	return open >= 0 && open > strings.LastIndex(prompt, thinkClose) &&
		strings.TrimSpace(prompt[open+len(thinkOpen):]) == ""
}

// messageValue converts a message to the dict the template sees (keys only when set, as
// an OpenAI request body would have them).
func messageValue(m *Message, esc *escaper, keepLead bool) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(esc.str(m.Role)))
	content, err := contentValue(m.Content, esc)
	if err != nil {
		return v, err
	}
	if s, ok := m.Content.(string); ok && keepLead {
		content = jinja.NewString(string(esc.keep) + esc.str(s))
	}
	d.Set("content", content)
	if m.ReasoningContent != nil {
		d.Set("reasoning_content", jinja.NewString(esc.str(*m.ReasoningContent)))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			cv := jinja.NewDict()
			c := cv.AsDict()
			if tc.ID != "" {
				c.Set("id", jinja.NewString(esc.str(tc.ID)))
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			c.Set("type", jinja.NewString(esc.str(typ)))
			fv := jinja.NewDict()
			f := fv.AsDict()
			f.Set("name", jinja.NewString(esc.str(tc.Function.Name)))
			args, err := argumentsValue(tc.Function.Arguments, esc)
			if err != nil {
				return v, fmt.Errorf("tool_calls[%d] (%s): %w", i, tc.Function.Name, err)
			}
			f.Set("arguments", args)
			c.Set("function", fv)
			calls[i] = cv
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(esc.str(m.ToolCallID)))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(esc.str(m.Name)))
	}
	return v, nil
}

func contentValue(c any, esc *escaper) (jinja.Value, error) {
	switch c := c.(type) {
	case nil:
		return jinja.None(), nil
	case string:
		return jinja.NewString(esc.str(c)), nil
	case []ContentPart:
		parts := make([]jinja.Value, len(c))
		for i, p := range c {
			pv := jinja.NewDict()
			d := pv.AsDict()
			d.Set("type", jinja.NewString(esc.str(p.Type)))
			switch {
			case p.Type == "text":
				d.Set("text", jinja.NewString(esc.str(p.Text)))
			case p.ImageURL != nil:
				d.Set("image_url", urlValue(esc.str(p.ImageURL.URL)))
			case p.VideoURL != nil:
				d.Set("video_url", urlValue(esc.str(p.VideoURL.URL)))
			}
			parts[i] = pv
		}
		return jinja.NewList(parts), nil
	}
	return jinja.Undefined(), fmt.Errorf("content of type %T: want a string, []ContentPart or nil", c)
}

func urlValue(url string) jinja.Value {
	v := jinja.NewDict()
	v.AsDict().Set("url", jinja.NewString(url))
	return v
}

// argumentsValue parses arguments JSON into a dict (as vLLM and transformers hand them to
// templates, which iterate them with |items); text that is not a JSON object stays a string.
func argumentsValue(args string, esc *escaper) (jinja.Value, error) {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return jinja.NewDict(), nil
	}
	if trimmed[0] != '{' {
		return jinja.NewString(esc.str(args)), nil
	}
	v, err := jsonValue([]byte(trimmed), esc)
	if err != nil {
		return jinja.NewString(esc.str(args)), nil
	}
	return v, nil
}

// jsonValue decodes JSON into template values keeping object key order, which tojson must
// reproduce.
func jsonValue(raw []byte, esc *escaper) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, esc)
	if err != nil {
		return v, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return v, errors.New("invalid JSON: trailing data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, esc *escaper) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '[':
			var items []jinja.Value
			for dec.More() {
				item, err := decodeValue(dec, esc)
				if err != nil {
					return item, err
				}
				items = append(items, item)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		case '{':
			v := jinja.NewDict()
			d := v.AsDict()
			for dec.More() {
				key, err := dec.Token()
				if err != nil {
					return v, err
				}
				item, err := decodeValue(dec, esc)
				if err != nil {
					return v, err
				}
				d.Set(esc.str(key.(string)), item)
			}
			_, err := dec.Token()
			return v, err
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", tok)
	case string:
		return jinja.NewString(esc.str(tok)), nil
	default:
		return jinja.FromGoValue(tok), nil
	}
}
