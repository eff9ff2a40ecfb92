package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"pistil/exec"
	"pistil/exec/constrain"
)

// Structured output: response_format (json_object, json_schema) and a forced tool_choice
// ("required", or a named function) compile to a constrain.Grammar when the request is
// parsed, so a schema the engine cannot honour is a 400 before anything is queued. The
// grammar wraps the request's sampler: it starts after </think> when the prompt leaves
// the model thinking, from the first token otherwise. These functions take plain values
// (a schema, a tool list, a choice) so the Responses API path can call them too.

// constraint is what a request forces its output to be.
type constraint struct {
	grammar *constrain.Grammar
	what    string // for messages: "response_format json_schema", "tool_choice required", ...
}

// structuredState holds what the server precomputes for constraints from the tokenizer,
// once, on the first constrained request (0.2 s for the Qwen vocabulary).
type structuredState struct {
	once  sync.Once
	vocab *constrain.Vocab
	err   error
}

func (s *Server) constrainVocab() (*constrain.Vocab, error) {
	st := &s.structured
	st.once.Do(func() {
		ends := make([]int32, 0, len(s.stopTokens))
		for id := range s.stopTokens {
			ends = append(ends, id)
		}
		slices.Sort(ends)
		st.vocab, st.err = constrain.NewVocab(s.tok, s.tok.VocabSize(), ends)
	})
	return st.vocab, st.err
}

// parseResponseFormat reads chat's response_format: nil for text.
func parseResponseFormat(raw json.RawMessage) (*constraint, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var rf struct {
		Type       *string         `json:"type"`
		JSONSchema json.RawMessage `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil || rf.Type == nil || bytes.TrimSpace(raw)[0] != '{' {
		return nil, invalidValue("response_format", "response_format must be an object with a type")
	}
	switch *rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &constraint{grammar: constrain.JSONObject(), what: "response_format json_object"}, nil
	case "json_schema":
		if isNull(rf.JSONSchema) {
			return nil, badRequest("response_format.json_schema", "missing_required_parameter", "response_format.json_schema is required for type json_schema")
		}
		var js struct {
			Name   *string         `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}
		if err := json.Unmarshal(rf.JSONSchema, &js); err != nil {
			return nil, invalidValue("response_format.json_schema", "response_format.json_schema must be an object with name and schema")
		}
		if js.Name == nil || *js.Name == "" {
			return nil, badRequest("response_format.json_schema.name", "missing_required_parameter", "response_format.json_schema.name is required")
		}
		return compileSchemaConstraint(js.Schema, "response_format.json_schema.schema")
	}
	return nil, invalidValue("response_format.type", "response_format.type must be text, json_object or json_schema; got %q", truncate(*rf.Type, 40))
}

// compileSchemaConstraint compiles a JSON Schema given as output format. An absent schema
// is any JSON object. Strict or not, the output always follows the schema: the engine
// has no looser mode.
func compileSchemaConstraint(schema json.RawMessage, param string) (*constraint, *apiError) {
	if isNull(schema) {
		return &constraint{grammar: constrain.JSONObject(), what: "response_format json_schema"}, nil
	}
	g, err := constrain.CompileSchema(schema)
	if err != nil {
		return nil, schemaError(param, err)
	}
	return &constraint{grammar: g, what: "response_format json_schema"}, nil
}

func schemaError(param string, err error) *apiError {
	var ue *constrain.UnsupportedError
	if errors.As(err, &ue) {
		return badRequest(param, "unsupported_schema", "%s: %v", param, err)
	}
	return invalidValue(param, "%s: %v", param, err)
}

// toolChoice is a validated tool_choice.
type toolChoice struct {
	Mode string // "auto", "none", "required" or "function"
	Name string // for "function"
	// Allowed, from {"type": "allowed_tools"}, limits "required" to these functions (with
	// mode "auto" it is not enforced: the model may also answer, or call another tool).
	Allowed []string
}

func (c toolChoice) forced() bool { return c.Mode == "required" || c.Mode == "function" }

func parseToolChoice(raw json.RawMessage) (toolChoice, *apiError) {
	if isNull(raw) {
		return toolChoice{Mode: "auto"}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "auto", "none", "required":
			return toolChoice{Mode: s}, nil
		}
		return toolChoice{}, invalidValue("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or a function object; got %q", truncate(s, 40))
	}
	var obj struct {
		Type     *string `json:"type"`
		Function *struct {
			Name *string `json:"name"`
		} `json:"function"`
		Name         *string `json:"name"` // the Responses API's flat form
		AllowedTools *struct {
			Mode  string `json:"mode"`
			Tools []struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		} `json:"allowed_tools"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return toolChoice{}, invalidValue("tool_choice", "tool_choice must be a string or an object")
	}
	if obj.Type != nil && *obj.Type == "allowed_tools" {
		at := obj.AllowedTools
		if at == nil || len(at.Tools) == 0 {
			return toolChoice{}, invalidValue("tool_choice.allowed_tools", "tool_choice.allowed_tools needs tools")
		}
		if at.Mode != "auto" && at.Mode != "required" {
			return toolChoice{}, invalidValue("tool_choice.allowed_tools.mode", "tool_choice.allowed_tools.mode must be \"auto\" or \"required\"")
		}
		c := toolChoice{Mode: at.Mode}
		for i, t := range at.Tools {
			if t.Type != "function" || t.Function.Name == "" {
				return toolChoice{}, invalidValue(fmt.Sprintf("tool_choice.allowed_tools.tools[%d]", i), "allowed tools must be functions with a name")
			}
			c.Allowed = append(c.Allowed, t.Function.Name)
		}
		return c, nil
	}
	if obj.Type == nil || *obj.Type != "function" {
		return toolChoice{}, unsupported("tool_choice.type", "tool_choice objects must have type \"function\" or \"allowed_tools\"")
	}
	name := obj.Name
	if obj.Function != nil {
		name = obj.Function.Name
	}
	if name == nil || *name == "" {
		return toolChoice{}, badRequest("tool_choice.function.name", "missing_required_parameter", "tool_choice.function.name is required")
	}
	return toolChoice{Mode: "function", Name: *name}, nil
}

// toolChoiceConstraint is the grammar of a forced tool_choice over the request's tools
// (nil when the choice is not forced).
func toolChoiceConstraint(choice toolChoice, tools []toolDef, parallel bool) (*constraint, *apiError) {
	if !choice.forced() {
		return nil, nil
	}
	if len(tools) == 0 {
		return nil, invalidValue("tool_choice", "tool_choice %q needs tools", choice.Mode)
	}
	var list []constrain.Tool
	for i, t := range tools {
		if choice.Mode == "function" && t.Name != choice.Name || choice.Allowed != nil && !slices.Contains(choice.Allowed, t.Name) {
			continue
		}
		params, e := toolParameters(t.Raw, i)
		if e != nil {
			return nil, e
		}
		list = append(list, constrain.Tool{Name: t.Name, Parameters: params})
	}
	if len(list) == 0 && choice.Allowed != nil {
		return nil, invalidValue("tool_choice.allowed_tools.tools", "none of tool_choice.allowed_tools is in tools")
	}
	if len(list) == 0 {
		return nil, invalidValue("tool_choice.function.name", "tool_choice names the function %q, which is not in tools", truncate(choice.Name, 64))
	}
	g, err := constrain.CompileToolCall(list, parallel)
	if err != nil {
		return nil, schemaError("tools", err)
	}
	what := "tool_choice required"
	if choice.Mode == "function" {
		what = "tool_choice " + choice.Name
	}
	return &constraint{grammar: g, what: what}, nil
}

// toolParameters reads function.parameters (or a flat tool's parameters) from a tool.
func toolParameters(raw json.RawMessage, i int) (json.RawMessage, *apiError) {
	var t struct {
		Parameters json.RawMessage `json:"parameters"`
		Function   *struct {
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, invalidValue(fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object", i)
	}
	if t.Function != nil {
		return t.Function.Parameters, nil
	}
	return t.Parameters, nil
}

// samplerFor builds a request's sampler (the engine's, under the request's constraint)
// and, when logprobs are asked for, their recorder (fed the logits the sampler was given,
// so before the mask).
func (s *Server) samplerFor(p *prepared) (exec.TokenSampler, *logprobRecorder, error) {
	var sampler exec.TokenSampler = newSampler(p.gen.Sampling)
	if p.constraint != nil {
		v, err := s.constrainVocab()
		if err != nil {
			return nil, nil, err
		}
		cs, err := constrain.NewSampler(sampler, p.constraint.grammar, v, constrain.Options{MaxTokens: p.maxTokens, Thinking: p.thinking})
		if err != nil {
			return nil, nil, err
		}
		sampler = cs
	}
	var lp *logprobRecorder
	if p.gen.Logprobs {
		lp = &logprobRecorder{top: p.gen.TopLogprobs,
			presence: p.gen.Sampling.PresencePenalty, frequency: p.gen.Sampling.FrequencyPenalty}
	}
	return sampler, lp, nil
}

// checkConstraint rejects what a constrained request cannot also ask for.
func checkConstraint(g *genRequest, c *constraint) *apiError {
	if c != nil && g.IgnoreEOS {
		return invalidValue("ignore_eos", "ignore_eos cannot be combined with %s: the constrained output ends with the turn", c.what)
	}
	return nil
}

// logprobFeed hands each emitted token's logprob entry to the deltas of that token (or
// a later one, when the output pipeline holds text back).
type logprobFeed struct {
	rec     *logprobRecorder
	pending []tokenLogprob
}

// token takes the entry of the token just sampled (call from onToken: stop tokens, which
// never reach the output, are left out).
func (f *logprobFeed) token() {
	if f == nil || f.rec == nil || len(f.rec.entries) == 0 {
		return
	}
	f.pending = append(f.pending, f.rec.entries[len(f.rec.entries)-1])
}

// attach puts the pending entries on the first delta, or on a delta of their own when
// final and there is none.
func (f *logprobFeed) attach(ds []outDelta, final bool) []outDelta {
	if f == nil || len(f.pending) == 0 {
		return ds
	}
	if len(ds) == 0 {
		if !final {
			return ds
		}
		ds = []outDelta{{}}
	}
	ds[0].Logprobs = append(ds[0].Logprobs, f.pending...)
	f.pending = nil
	return ds
}

// JSON forms of logprobs.

type chatLogprobs struct {
	Content []logprobContent `json:"content"`
	Refusal []logprobContent `json:"refusal"`
}

type logprobContent struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []logprobTop `json:"top_logprobs"`
}

type logprobTop struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type textLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func (s *Server) tokenText(id int32) (string, []int) {
	b := s.tok.TokenBytes(id)
	ints := make([]int, len(b))
	for i, c := range b {
		ints[i] = int(c)
	}
	return s.tok.Decode([]int32{id}), ints
}

func (s *Server) chatLogprobsJSON(entries []tokenLogprob) json.RawMessage {
	out := chatLogprobs{Content: make([]logprobContent, 0, len(entries))}
	for _, e := range entries {
		text, b := s.tokenText(e.ID)
		c := logprobContent{Token: text, Logprob: e.Logprob, Bytes: b, TopLogprobs: []logprobTop{}}
		for _, t := range e.Top {
			tt, tb := s.tokenText(t.ID)
			c.TopLogprobs = append(c.TopLogprobs, logprobTop{Token: tt, Logprob: t.Logprob, Bytes: tb})
		}
		out.Content = append(out.Content, c)
	}
	return marshalJSON(out)
}

// textLogprobsJSON is the legacy completions form; offset is where the first entry's
// token starts in the completion text.
func (s *Server) textLogprobsJSON(entries []tokenLogprob, offset int) json.RawMessage {
	out := textLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, e := range entries {
		text, _ := s.tokenText(e.ID)
		out.Tokens = append(out.Tokens, text)
		out.TokenLogprobs = append(out.TokenLogprobs, e.Logprob)
		top := map[string]float64{}
		for _, t := range e.Top {
			tt, _ := s.tokenText(t.ID)
			if _, dup := top[tt]; !dup {
				top[tt] = t.Logprob
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(text)
	}
	return marshalJSON(out)
}

// logprobsText is the length of the entries' token texts, for the offsets of the next ones.
func (s *Server) logprobsText(entries []tokenLogprob) int {
	n := 0
	for _, e := range entries {
		n += len(s.tok.Decode([]int32{e.ID}))
	}
	return n
}
