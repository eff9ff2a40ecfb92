package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

type callMode int

const (
	modeUnknown callMode = iota // right after <tool_call>
	modeXML                     // Qwen3.5/3.6: <function=NAME><parameter=K>V</parameter></function>
	modeJSON                    // Qwen3: {"name": ..., "arguments": {...}}
	modeRaw                     // neither: dropped at </tool_call>
)

// xmlCall is the tool call being parsed (any mode; named for the family's main format).
type xmlCall struct {
	mode      callMode
	name      string
	index     int
	started   bool // the name delta went out
	params    int  // parameters emitted
	inParam   bool
	paramName string
	closed    bool // </function> seen and arguments closed
	// pending is the part of a parameter value or JSON body already searched for its
	// end marker, so long values are scanned once rather than on every push.
	pending strings.Builder
}

// maxNameLen bounds how long a function name may grow before the call is judged not to be
// one (the text then passes through as content).
const maxNameLen = 256

// collectUntil looks for the earliest of markers in buf. Found: its index in buf and the
// marker. Not found: buf moves into the call's pending text, except a tail that may be the
// start of a marker, and index is -1.
func (p *Parser) collectUntil(markers ...string) (index int, marker string) {
	index = -1
	for _, m := range markers {
		if i := strings.Index(p.buf, m); i >= 0 && (index < 0 || i < index) {
			index, marker = i, m
		}
	}
	if index >= 0 {
		return index, marker
	}
	keep := 0
	for _, m := range markers {
		keep = max(keep, partialSuffix(p.buf, m))
	}
	n := len(p.buf) - keep
	p.call.pending.WriteString(p.buf[:n])
	p.consume(n)
	return -1, ""
}

// takePending returns the pending text followed by the first n bytes of buf, consuming them.
func (p *Parser) takePending(n int) string {
	text := p.call.pending.String() + p.buf[:n]
	p.call.pending.Reset()
	p.consume(n)
	return text
}

const spaces = " \t\r\n"

// consume drops n bytes of buf the call has read.
func (p *Parser) consume(n int) {
	p.buf = p.buf[n:]
}

// consumeSpace drops leading whitespace; false when buf is all space.
func (p *Parser) consumeSpace() bool {
	p.consume(len(p.buf) - len(strings.TrimLeft(p.buf, spaces)))
	return p.buf != ""
}

// waitsFor reports whether buf is a proper prefix of one of the markers.
func waitsFor(buf string, markers ...string) bool {
	for _, m := range markers {
		if len(buf) < len(m) && strings.HasPrefix(m, buf) {
			return true
		}
	}
	return false
}

// toolCall advances one step of the tool-call state machine (run loops it).
func (p *Parser) toolCall(final bool) {
	c := p.call
	switch c.mode {
	case modeUnknown:
		if !p.consumeSpace() {
			return
		}
		switch {
		case strings.HasPrefix(p.buf, functionOpen):
			p.consume(len(functionOpen))
			c.mode = modeXML
		case strings.HasPrefix(p.buf, "{"):
			c.mode = modeJSON
		case !final && waitsFor(p.buf, functionOpen):
		default:
			c.mode = modeRaw
		}
	case modeXML:
		p.xmlStep(final)
	case modeJSON:
		if i, _ := p.collectUntil(toolCallClose); i >= 0 {
			if p.emitJSONCall(p.takePending(i)) {
				p.endCall(len(toolCallClose))
			} else {
				p.endRawCall(len(toolCallClose))
			}
		}
	case modeRaw:
		if i, _ := p.collectUntil(toolCallClose); i >= 0 {
			p.takePending(i)
			p.endRawCall(len(toolCallClose))
		}
	}
}

func (p *Parser) xmlStep(final bool) {
	c := p.call
	switch {
	case !c.started:
		end := strings.IndexAny(p.buf, ">\n<")
		if end < 0 && len(p.buf) <= maxNameLen {
			return // the name is still arriving
		}
		if end < 0 || end > maxNameLen {
			// Judged by the name's length alone, so a call reads the same whole or streamed.
			c.mode = modeRaw
			return
		}
		name := strings.TrimSpace(p.buf[:end])
		if p.buf[end] != '>' || name == "" {
			c.mode = modeRaw
			return
		}
		p.consume(end + 1)
		c.name, c.index, c.started = name, p.callCount, true
		p.callCount++
		p.add(Delta{ToolCall: &ToolCallDelta{Index: c.index, ID: p.newID(), Name: name}})
	case c.inParam:
		// the value's type is known only when it is complete; a missing </parameter> ends
		// it at the next <parameter= or </function>
		end, marker := p.collectUntil(parameterClose, parameterOpen, functionClose)
		if end < 0 {
			return
		}
		p.emitParam(p.takePending(end))
		if marker == parameterClose {
			p.consume(len(parameterClose))
		}
	case !c.closed:
		if !p.consumeSpace() {
			return
		}
		switch {
		case strings.HasPrefix(p.buf, parameterOpen):
			end := strings.IndexByte(p.buf, '>')
			if end < 0 {
				return
			}
			c.paramName = strings.TrimSpace(p.buf[len(parameterOpen):end])
			c.inParam = true
			p.consume(end + 1)
		case strings.HasPrefix(p.buf, functionClose):
			p.consume(len(functionClose))
			p.closeArguments()
		case strings.HasPrefix(p.buf, toolCallClose): // </function> missing
			p.closeArguments()
		case !final && waitsFor(p.buf, parameterOpen, functionClose, toolCallClose):
		default:
			// stray text between parameters: skip it up to the next tag
			next := strings.IndexByte(p.buf[1:], '<')
			if next < 0 {
				p.consume(len(p.buf))
			} else {
				p.consume(next + 1)
			}
		}
	default: // arguments closed; expect </tool_call>
		if !p.consumeSpace() {
			return
		}
		switch {
		case strings.HasPrefix(p.buf, toolCallClose):
			p.endCall(len(toolCallClose))
		case !final && waitsFor(p.buf, toolCallClose):
		default: // </tool_call> missing: whatever follows is content
			p.endCall(0)
		}
	}
}

// emitParam converts one parameter value and streams it as an arguments fragment.
func (p *Parser) emitParam(value string) {
	c := p.call
	value = strings.TrimPrefix(value, "\n")
	value = strings.TrimSuffix(value, "\n")
	frag := ", "
	if c.params == 0 {
		frag = "{"
	}
	frag += pyJSONString(c.paramName) + ": " + p.argumentJSON(c.name, c.paramName, value)
	c.params++
	c.inParam = false
	p.add(Delta{ToolCall: &ToolCallDelta{Index: c.index, Arguments: frag}})
}

func (p *Parser) closeArguments() {
	c := p.call
	frag := "}"
	if c.params == 0 {
		frag = "{}"
	}
	c.closed = true
	p.add(Delta{ToolCall: &ToolCallDelta{Index: c.index, Arguments: frag}})
}

// endCall leaves the tool call after skipping n bytes of closing tag.
func (p *Parser) endCall(n int) {
	p.consume(n)
	p.call = nil
	p.state = stateContent
	p.trimContentStart = true
}

// endRawCall ends a closed call that is not one (no function tag, a JSON body that does
// not parse). <tool_call> is an added token, so this was an attempt at a call, not prose,
// and an agent takes content for the final answer: the markup is dropped, as a call left
// open without a name is (finishToolCall), not passed off as text.
func (p *Parser) endRawCall(n int) {
	p.buf = p.buf[n:]
	p.call = nil
	p.state = stateContent
}

// finishToolCall closes a call cut off by the end of generation. An agent takes content
// for the final answer, so markup of a call that never got a name (or a JSON body that
// does not parse) is dropped rather than passed off as text.
func (p *Parser) finishToolCall() {
	c := p.call
	switch {
	case c.mode == modeXML && c.started:
		if c.inParam { // cut off inside a value: keep it, less a partial closing tag
			p.emitParam(p.takePending(len(p.buf) - partialSuffix(p.buf, parameterClose)))
		}
		if !c.closed {
			p.closeArguments()
		}
		p.buf = ""
	case c.mode == modeJSON && p.emitJSONCall(c.pending.String()+p.buf):
		p.buf = ""
	default:
		p.buf = ""
	}
	p.call = nil
	p.state = stateContent
}

// emitJSONCall parses a Qwen3 {"name", "arguments"} call; false when it is not one.
func (p *Parser) emitJSONCall(body string) bool {
	var call struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &call); err != nil || call.Name == "" {
		return false
	}
	args := call.Arguments
	if args == nil {
		args = call.Parameters
	}
	text := "{}"
	if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if trimmed[0] == '"' { // arguments given as a string holding JSON
			var s string
			if json.Unmarshal(trimmed, &s) != nil {
				return false
			}
			trimmed = []byte(s)
		}
		formatted, err := pyJSON(trimmed)
		if err != nil || !strings.HasPrefix(formatted, "{") {
			return false
		}
		text = formatted
	}
	index := p.callCount
	p.callCount++
	p.add(Delta{ToolCall: &ToolCallDelta{Index: index, ID: p.newID(), Name: call.Name}})
	p.add(Delta{ToolCall: &ToolCallDelta{Index: index, Arguments: text}})
	return true
}

// argumentJSON is a parameter value as JSON: text that parses as JSON keeps its type
// (numbers, booleans, null, objects, lists), anything else is a string, as vLLM's
// qwen3_coder parser does; parameters the tool declares as strings stay strings.
func (p *Parser) argumentJSON(function, param, value string) string {
	if !p.stringArg[function][param] {
		if formatted, err := pyJSON([]byte(value)); err == nil {
			return formatted
		}
	}
	return pyJSONString(value)
}

// stringParameters maps each tool's name to its parameters declared "type": "string".
func stringParameters(tools []json.RawMessage) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, raw := range tools {
		var tool struct {
			Name       string `json:"name"`
			Parameters *struct {
				Properties map[string]struct {
					Type any `json:"type"`
				} `json:"properties"`
			} `json:"parameters"`
			Function *json.RawMessage `json:"function"`
		}
		if json.Unmarshal(raw, &tool) != nil {
			continue
		}
		if tool.Function != nil {
			tool.Name, tool.Parameters = "", nil
			if json.Unmarshal(*tool.Function, &tool) != nil {
				continue
			}
		}
		if tool.Name == "" || tool.Parameters == nil {
			continue
		}
		for name, prop := range tool.Parameters.Properties {
			if isStringType(prop.Type) {
				if out[tool.Name] == nil {
					out[tool.Name] = map[string]bool{}
				}
				out[tool.Name][name] = true
			}
		}
	}
	return out
}

// isStringType reports whether a JSON schema "type" admits only strings: "string", or a
// list of "string" and possibly "null".
func isStringType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "string"
	case []any:
		hasString := false
		for _, x := range t {
			switch x {
			case "string":
				hasString = true
			case "null":
			default:
				return false
			}
		}
		return hasString
	}
	return false
}

// pyJSON re-serialises one JSON value the way Python's json.dumps(ensure_ascii=False)
// does (", " and ": " separators, key order kept, number literals as written).
func pyJSON(data []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(data)))
	dec.UseNumber()
	var b strings.Builder
	if err := writePyJSON(&b, dec); err != nil {
		return "", err
	}
	if dec.More() {
		return "", fmt.Errorf("trailing data after JSON value")
	}
	if _, err := dec.Token(); err == nil {
		return "", fmt.Errorf("trailing data after JSON value")
	}
	return b.String(), nil
}

func writePyJSON(b *strings.Builder, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		closing := map[json.Delim]json.Delim{'[': ']', '{': '}'}[t]
		if closing == 0 {
			return fmt.Errorf("unexpected %v", t)
		}
		b.WriteRune(rune(t))
		for i := 0; dec.More(); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			if t == '{' {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				b.WriteString(pyJSONString(key.(string)))
				b.WriteString(": ")
			}
			if err := writePyJSON(b, dec); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		b.WriteRune(rune(closing))
	case string:
		b.WriteString(pyJSONString(t))
	case json.Number:
		b.WriteString(t.String())
	case bool:
		b.WriteString(fmt.Sprint(t))
	case nil:
		b.WriteString("null")
	}
	return nil
}

// pyJSONString quotes s as Python's json.dumps(ensure_ascii=False) does.
func pyJSONString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
