package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool is a function the model may be made to call.
type Tool struct {
	Name string
	// Parameters is the function's JSON Schema (an object schema; empty: no parameters).
	Parameters json.RawMessage
}

// CompileToolCall compiles the checkpoint's tool-call format (Qwen3.5/3.6 XML):
//
//	<tool_call>
//	<function=NAME>
//	<parameter=P>
//	VALUE
//	</parameter>
//	</function>
//	</tool_call>
//
// for one of tools (tool_choice "required"; one tool: a named tool_choice), whose
// parameters satisfy the tool's schema, then the end of the turn. A parameter the schema
// types as a string is written raw, as the template renders it; any other is JSON, which
// the chat parser keeps typed. parallel allows further calls, one per line.
func CompileToolCall(tools []Tool, parallel bool) (*Grammar, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("no tools to call")
	}
	var fns []frag
	for i, t := range tools {
		if t.Name == "" || strings.ContainsAny(t.Name, ">\n<") {
			return nil, fmt.Errorf("tools[%d]: the name %q cannot be written in a tool call", i, t.Name)
		}
		params, err := toolParams(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tools[%d].function.parameters: %w", i, err)
		}
		fns = append(fns, seq(lit(t.Name+">\n"), params, lit("</function>\n")))
	}
	call := seq(sym(symToolCallOpen), lit("\n<function="), alt(fns...), sym(symToolCallClose))
	root := call
	if parallel {
		root = seq(root, repeat(seq(lit("\n"), call), 0, -1))
	}
	return newGrammar(root, true)
}

func toolParams(raw json.RawMessage) (frag, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return empty(), nil
	}
	s, p, err := parseSchema(raw)
	if err != nil {
		return nil, err
	}
	if s.isBool || s.hasRef || s.anyOf != nil || s.enum != nil || len(s.types) > 1 || len(s.types) == 1 && s.types[0] != "object" {
		return nil, &UnsupportedError{Path: s.path, Keyword: "type", Reason: "tool parameters must be an object schema with properties"}
	}
	c := &compiler{p: p, active: map[string]int{}, mode: modeJSONTool}
	required := map[string]bool{}
	for _, r := range s.required {
		required[r] = true
	}
	type param struct {
		f        frag
		required bool
	}
	var params []param
	declared := map[string]bool{}
	add := func(name string, value frag, req bool) error {
		if strings.ContainsAny(name, ">\n<") {
			return fmt.Errorf("the parameter name %q cannot be written in a tool call", name)
		}
		params = append(params, param{seq(lit("<parameter="+name+">\n"), value), req})
		return nil
	}
	for _, prop := range s.props {
		declared[prop.name] = true
		value, err := c.paramValue(prop.schema)
		if err != nil {
			return nil, err
		}
		if value == nil {
			if required[prop.name] {
				return nil, fmt.Errorf("required parameter %q admits no value", prop.name)
			}
			continue
		}
		if err := add(prop.name, value, required[prop.name]); err != nil {
			return nil, err
		}
	}
	for _, r := range s.required {
		if declared[r] {
			continue
		}
		declared[r] = true
		if !s.allowExtra && s.additional == nil {
			return nil, fmt.Errorf("required parameter %q is not in properties and additionalProperties is false", r)
		}
		value := c.anyValue()
		if s.additional != nil {
			if value, err = c.value(s.additional); err != nil {
				return nil, err
			}
		}
		if value == nil {
			return nil, fmt.Errorf("required parameter %q admits no value", r)
		}
		if err := add(r, seq(value, lit("\n</parameter>\n")), true); err != nil {
			return nil, err
		}
	}
	fs := make([]frag, len(params))
	for i, pm := range params {
		fs[i] = pm.f
		if !pm.required {
			fs[i] = opt(pm.f)
		}
	}
	return seq(fs...), nil
}

// paramValue is a parameter's value and its closing tag: raw text for a schema typed only
// as a string (the chat parser keeps those as strings), JSON for anything else.
func (c *compiler) paramValue(s *schema) (frag, error) {
	if !stringTyped(s) {
		v, err := c.value(s)
		if err != nil || v == nil {
			return nil, err
		}
		return seq(v, lit("\n</parameter>\n")), nil
	}
	switch {
	case s.enum != nil:
		var fs []frag
		for _, v := range s.enum {
			var text string
			if json.Unmarshal(v, &text) != nil {
				continue
			}
			if strings.ContainsAny(text, "\n") || strings.Contains(text, "</") || strings.Contains(text, "<p") {
				return nil, &UnsupportedError{Path: s.path, Keyword: "enum", Reason: fmt.Sprintf("the value %q cannot be written raw in a tool call", text)}
			}
			fs = append(fs, lit(text))
		}
		if len(fs) == 0 {
			return nil, nil
		}
		return seq(alt(fs...), lit("\n</parameter>\n")), nil
	case s.format != "":
		return seq(formatFrag(s.format), lit("\n</parameter>\n")), nil
	}
	return seq(str(strSpec{min: s.minLength, max: s.maxLength, mode: modeRaw}), lit("</parameter>\n")), nil
}

// stringTyped mirrors the chat parser's test (a "type" of "string", or of "string" and
// "null"): those parameters are read back as raw strings.
func stringTyped(s *schema) bool {
	if s.isBool || s.hasRef || s.anyOf != nil || len(s.types) == 0 {
		return false
	}
	hasString := false
	for _, t := range s.types {
		switch t {
		case "string":
			hasString = true
		case "null":
		default:
			return false
		}
	}
	return hasString
}
