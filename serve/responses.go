package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The OpenAI Responses API (POST /v1/responses) on the chat engine path. A Responses
// request is translated into the Chat Completions request it means (instructions and
// input items become messages, flat function tools become chat tools, reasoning.effort
// becomes reasoning_effort, text.format becomes response_format) and then goes through
// the chat request's own validation, template, context check, queue, prefix cache,
// cancellation and metrics. Only the output is written in the Responses shape
// (responses_output.go). There is no second generation path.

// rawResponses holds the Responses request fields pistil reads. Fields clients always
// send but a local server cannot honour (store, include, prompt_cache_key,
// client_metadata, metadata, user, service_tier, truncation, safety_identifier,
// reasoning.summary, text.verbosity, parallel_tool_calls) are accepted and ignored.
type rawResponses struct {
	Model              json.RawMessage `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       json.RawMessage `json:"instructions"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	MaxOutputTokens    json.RawMessage `json:"max_output_tokens"`
	Stream             json.RawMessage `json:"stream"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Text               json.RawMessage `json:"text"`
	PreviousResponseID *string         `json:"previous_response_id"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Store              *bool           `json:"store"`
	Metadata           json.RawMessage `json:"metadata"`
	Background         *bool           `json:"background"`
	Conversation       json.RawMessage `json:"conversation"`
	Prompt             json.RawMessage `json:"prompt"`
	TopLogprobs        json.RawMessage `json:"top_logprobs"`

	// Passed to the chat request unchanged: the sampling fields (top_k, min_p, seed and
	// the penalties are extensions local servers accept) and chat_template_kwargs.
	Temperature        json.RawMessage `json:"temperature"`
	TopP               json.RawMessage `json:"top_p"`
	TopK               json.RawMessage `json:"top_k"`
	MinP               json.RawMessage `json:"min_p"`
	Seed               json.RawMessage `json:"seed"`
	PresencePenalty    json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty   json.RawMessage `json:"frequency_penalty"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	IgnoreEOS          json.RawMessage `json:"ignore_eos"`
}

// responsesRequest is a Responses request translated, with what its output echoes.
type responsesRequest struct {
	chat *chatRequest
	// history is the conversation this request adds to the one named by
	// previous_response_id (its input as chat messages, instructions excluded: the API
	// does not carry instructions over to the next response).
	history      []json.RawMessage
	previous     string
	instructions json.RawMessage // echoed: a string or null
	maxOutput    json.RawMessage
	tools        []json.RawMessage // the function tools as the client sent them
	toolChoice   json.RawMessage
	effort       json.RawMessage
	summary      json.RawMessage
	parallel     bool
	store        bool
	metadata     json.RawMessage
	textFormat   json.RawMessage
	dropped      []string // hosted tool types left out of the prompt
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	p, ok := s.prepare(w, r, func(body []byte) (*prepared, *apiError) {
		req, e := s.parseResponsesRequest(body)
		if e != nil {
			return nil, e
		}
		if len(req.dropped) > 0 {
			s.cfg.Logger.Info("responses: hosted tools dropped from the prompt (a local server cannot run them)", "types", strings.Join(req.dropped, ","))
		}
		p, e := s.prepareChat(req.chat)
		if e != nil {
			return nil, responsesParam(e)
		}
		p.idPrefix = "resp_"
		p.answer = func(x *exchange, ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, j *job, events <-chan []outDelta) {
			s.answerResponses(x, req, ctx, cancel, w, j, events)
		}
		return p, nil
	})
	if ok {
		s.execute(w, r, p)
	}
}

// parseResponsesRequest validates the Responses-only structure (input items, tools,
// tool_choice, reasoning, text) with params named as the client sent them, and builds
// the equivalent chat body, which parseChatRequest validates like any other.
func (s *Server) parseResponsesRequest(body []byte) (*responsesRequest, *apiError) {
	var raw rawResponses
	if e := decodeObject(body, &raw); e != nil {
		return nil, e
	}
	req := &responsesRequest{parallel: raw.ParallelToolCalls == nil || *raw.ParallelToolCalls,
		store: raw.Store == nil || *raw.Store, metadata: raw.Metadata, maxOutput: raw.MaxOutputTokens}
	if raw.Background != nil && *raw.Background {
		return nil, unsupported("background", "background responses are not supported; a request is answered while the client waits")
	}
	if !isNull(raw.Conversation) {
		return nil, unsupported("conversation", "conversation objects are not supported; send the input items, or use previous_response_id")
	}
	if !isNull(raw.Prompt) {
		return nil, unsupported("prompt", "prompt templates are not supported; send instructions and input")
	}
	if !isNull(raw.TopLogprobs) && string(bytes.TrimSpace(raw.TopLogprobs)) != "0" {
		return nil, unsupported("top_logprobs", "top_logprobs is not supported yet")
	}

	chatBody := map[string]json.RawMessage{}
	for key, v := range map[string]json.RawMessage{"model": raw.Model, "temperature": raw.Temperature, "top_p": raw.TopP,
		"top_k": raw.TopK, "min_p": raw.MinP, "seed": raw.Seed, "presence_penalty": raw.PresencePenalty,
		"frequency_penalty": raw.FrequencyPenalty, "chat_template_kwargs": raw.ChatTemplateKwargs, "stream": raw.Stream,
		"max_completion_tokens": raw.MaxOutputTokens, "ignore_eos": raw.IgnoreEOS} {
		if !isNull(v) {
			chatBody[key] = v
		}
	}

	var system []string
	if !isNull(raw.Instructions) {
		var text string
		if err := json.Unmarshal(raw.Instructions, &text); err != nil {
			return nil, invalidValue("instructions", "instructions must be a string")
		}
		req.instructions = raw.Instructions
		if text != "" {
			system = append(system, text)
		}
	}
	if raw.PreviousResponseID != nil {
		req.previous = *raw.PreviousResponseID
	}
	var earlier []json.RawMessage
	if req.previous != "" {
		prev, ok := s.responseStore.get(req.previous)
		if !ok {
			return nil, badRequest("previous_response_id", "previous_response_not_found",
				"previous_response_id %q is not kept by this server: it keeps the last %d stored responses in memory (and none made with store: false); send the whole conversation as input instead",
				truncate(req.previous, 80), responseStoreEntries)
		}
		earlier = prev
	}
	items, e := parseInputItems(raw.Input, s.responseStore.item)
	if e != nil {
		return nil, e
	}
	// The Qwen template allows one system message, first: instructions and the
	// system/developer items before any other item are joined into it; later ones are
	// rendered as user messages (Codex sends developer items between turns).
	lead := 0
	for lead < len(items) && items[lead].role == "system" && len(earlier) == 0 {
		system = append(system, items[lead].text)
		lead++
	}
	var messages []json.RawMessage
	if len(system) > 0 {
		messages = append(messages, chatMessageJSON("system", strings.Join(system, "\n\n")))
	}
	req.history = append(append(req.history, earlier...), itemsToMessages(items[lead:])...)
	messages = append(messages, req.history...)
	if len(messages) == 0 {
		return nil, invalidValue("input", "input must hold at least one item")
	}
	chatBody["messages"] = marshalJSON(messages)

	tools, e := req.parseTools(raw.Tools)
	if e != nil {
		return nil, e
	}
	if len(tools) > 0 {
		chatBody["tools"] = marshalJSON(tools)
	}
	if !isNull(raw.ToolChoice) {
		req.toolChoice = raw.ToolChoice
		choice, e := convertToolChoice(raw.ToolChoice)
		if e != nil {
			return nil, e
		}
		chatBody["tool_choice"] = choice
	}
	if !isNull(raw.Reasoning) {
		var rs struct {
			Effort  json.RawMessage `json:"effort"`
			Summary json.RawMessage `json:"summary"`
		}
		if e := decodeObject(raw.Reasoning, &rs); e != nil {
			return nil, invalidValue("reasoning", "reasoning must be an object with effort and summary")
		}
		req.effort, req.summary = rs.Effort, rs.Summary
		if !isNull(rs.Effort) {
			chatBody["reasoning_effort"] = rs.Effort
		}
	}
	if !isNull(raw.Text) {
		var text struct {
			Format json.RawMessage `json:"format"`
		}
		if e := decodeObject(raw.Text, &text); e != nil {
			return nil, invalidValue("text", "text must be an object")
		}
		if !isNull(text.Format) {
			req.textFormat = text.Format
			format, e := convertTextFormat(text.Format)
			if e != nil {
				return nil, e
			}
			chatBody["response_format"] = format
		}
	}
	chat, e := parseChatRequest(marshalJSON(chatBody))
	if e != nil {
		return nil, responsesParam(e)
	}
	req.chat = chat
	return req, nil
}

// inputItem is one validated input item reduced to what the chat template renders.
type inputItem struct {
	kind      string // "message", "function_call", "function_call_output", "reasoning"
	role      string // message: system (developer too), user, assistant
	text      string // message text, call output, or reasoning
	callID    string
	name      string
	arguments string
}

// parseInputItems reads input: a string (one user message) or a list of items. An
// item_reference is resolved by lookup among the output items of stored responses (the AI
// SDK sends its earlier steps' items so when store is on).
func parseInputItems(raw json.RawMessage, lookup func(id string) (inputItem, bool)) ([]inputItem, *apiError) {
	if isNull(raw) {
		return nil, badRequest("input", "missing_required_parameter", "input is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return []inputItem{{kind: "message", role: "user", text: text}}, nil
	}
	list, aerr := rawArray(raw, "input", "input must be a string or an array of input items", "input items", maxMessages)
	if aerr != nil {
		return nil, aerr
	}
	items := make([]inputItem, 0, len(list))
	for i, rawItem := range list {
		param := fmt.Sprintf("input[%d]", i)
		var it struct {
			Type             *string         `json:"type"`
			Role             *string         `json:"role"`
			Content          json.RawMessage `json:"content"`
			CallID           *string         `json:"call_id"`
			Name             *string         `json:"name"`
			Arguments        json.RawMessage `json:"arguments"`
			Output           json.RawMessage `json:"output"`
			Summary          json.RawMessage `json:"summary"`
			EncryptedContent *string         `json:"encrypted_content"`
			ID               *string         `json:"id"`
		}
		if t := bytes.TrimSpace(rawItem); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &it) != nil {
			return nil, invalidValue(param, "%s must be an input item object", param)
		}
		kind := "message"
		if it.Type != nil {
			kind = *it.Type
		} else if it.Role == nil {
			return nil, invalidValue(param+".type", "%s.type is required", param)
		}
		item := inputItem{kind: kind}
		switch kind {
		case "message":
			if it.Role == nil {
				return nil, invalidValue(param+".role", "%s.role is required", param)
			}
			switch *it.Role {
			case "system", "developer":
				item.role = "system"
			case "user", "assistant":
				item.role = *it.Role
			default:
				return nil, invalidValue(param+".role", "%s.role must be developer, system, user or assistant; got %q", param, truncate(*it.Role, 40))
			}
			t, e := partsText(param+".content", it.Content)
			if e != nil {
				return nil, e
			}
			item.text = t
		case "function_call":
			if it.CallID == nil || *it.CallID == "" {
				return nil, invalidValue(param+".call_id", "%s.call_id is required", param)
			}
			if it.Name == nil || *it.Name == "" {
				return nil, invalidValue(param+".name", "%s.name is required", param)
			}
			item.callID, item.name, item.arguments = *it.CallID, *it.Name, "{}"
			if !isNull(it.Arguments) {
				var args string
				if err := json.Unmarshal(it.Arguments, &args); err != nil {
					return nil, invalidValue(param+".arguments", "%s.arguments must be a string holding a JSON object", param)
				}
				if strings.TrimSpace(args) != "" {
					var obj map[string]json.RawMessage
					if json.Unmarshal([]byte(args), &obj) != nil {
						return nil, invalidValue(param+".arguments", "%s.arguments must be a string holding a JSON object", param)
					}
					item.arguments = args
				}
			}
		case "function_call_output":
			if it.CallID == nil || *it.CallID == "" {
				return nil, invalidValue(param+".call_id", "%s.call_id is required", param)
			}
			item.callID = *it.CallID
			if isNull(it.Output) {
				return nil, invalidValue(param+".output", "%s.output is required", param)
			}
			t, e := partsText(param+".output", it.Output)
			if e != nil {
				return nil, e
			}
			item.text = t
		case "reasoning":
			// Reasoning a client passes back: its text (reasoning_text parts, else the
			// summary) rides on the next assistant message, where the template renders it
			// (Qwen keeps the reasoning of the turns after the last user message).
			t, _ := partsText(param+".content", it.Content)
			if t == "" {
				t, _ = partsText(param+".summary", it.Summary)
			}
			item.text = t
		case "item_reference":
			if it.ID == nil || *it.ID == "" {
				return nil, invalidValue(param+".id", "%s.id is required", param)
			}
			ref, ok := lookup(*it.ID)
			if !ok {
				return nil, badRequest(param+".id", "item_not_found",
					"%s.id %q is not an output item of a response this server keeps (the last %d stored); send the item itself",
					param, truncate(*it.ID, 80), responseStoreEntries)
			}
			item = ref
		default:
			return nil, unsupported(param+".type", "input items of type %q are not supported (message, function_call, function_call_output and reasoning are)", truncate(kind, 40))
		}
		items = append(items, item)
	}
	return items, nil
}

// partsText flattens a string or a list of text parts (input_text, output_text,
// summary_text, reasoning_text, text), concatenated with no joiner as chat content is.
func partsText(param string, raw json.RawMessage) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalidValue(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var part struct {
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		if t := bytes.TrimSpace(p); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &part) != nil || part.Type == nil {
			return "", invalidValue(pp, "%s must be a content part object with a type", pp)
		}
		switch *part.Type {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			if part.Text == nil {
				return "", invalidValue(pp+".text", "%s.text is required", pp)
			}
			b.WriteString(*part.Text)
		case "refusal":
		case "input_image", "input_file", "input_audio":
			return "", unsupported(pp+".type", "content parts of type %q are not supported: this model serves text only", *part.Type)
		default:
			return "", invalidValue(pp+".type", "unknown content part type %q", truncate(*part.Type, 40))
		}
	}
	return b.String(), nil
}

// itemsToMessages renders input items as chat messages: function calls join the
// assistant message before them (a turn's text and calls are one message), reasoning
// joins the next assistant message, call outputs become tool messages.
func itemsToMessages(items []inputItem) []json.RawMessage {
	type message struct {
		Role             string           `json:"role"`
		Content          *string          `json:"content"`
		ReasoningContent string           `json:"reasoning_content,omitempty"`
		ToolCalls        []map[string]any `json:"tool_calls,omitempty"`
		ToolCallID       string           `json:"tool_call_id,omitempty"`
	}
	var out []*message
	reasoning := ""
	for _, it := range items {
		var last *message
		if n := len(out); n > 0 {
			last = out[n-1]
		}
		switch it.kind {
		case "reasoning":
			reasoning += it.text
		case "message":
			role := it.role
			if role == "system" {
				role = "user" // a system item after the conversation started (see above)
			}
			text := it.text
			m := &message{Role: role, Content: &text}
			if role == "assistant" {
				m.ReasoningContent, reasoning = reasoning, ""
			}
			out = append(out, m)
		case "function_call":
			call := map[string]any{"id": it.callID, "type": "function",
				"function": map[string]any{"name": it.name, "arguments": it.arguments}}
			if last == nil || last.Role != "assistant" || reasoning != "" {
				last = &message{Role: "assistant", ReasoningContent: reasoning}
				reasoning = ""
				out = append(out, last)
			}
			last.ToolCalls = append(last.ToolCalls, call)
		case "function_call_output":
			text := it.text
			out = append(out, &message{Role: "tool", Content: &text, ToolCallID: it.callID})
		}
	}
	if reasoning != "" {
		// Reasoning with no answer after it: the assistant turn is the reasoning alone.
		empty := ""
		out = append(out, &message{Role: "assistant", Content: &empty, ReasoningContent: reasoning})
	}
	msgs := make([]json.RawMessage, len(out))
	for i, m := range out {
		msgs[i] = marshalJSON(m)
	}
	return msgs
}

func chatMessageJSON(role, content string) json.RawMessage {
	return marshalJSON(map[string]string{"role": role, "content": content})
}

// hostedToolTypes are the Responses tool types that OpenAI runs on its side; a local
// server cannot, so they are left out of the prompt (with a log line) rather than
// refused: agents send them by default.
var hostedToolTypes = map[string]bool{
	"web_search": true, "web_search_preview": true, "web_search_2025_08_26": true, "web_search_preview_2025_03_11": true,
	"file_search": true, "code_interpreter": true, "image_generation": true, "computer_use_preview": true,
	"computer": true, "mcp": true, "local_shell": true, "shell": true, "apply_patch": true, "custom": true,
	"namespace": true, "tool_search": true,
}

// parseTools turns flat function tools into chat tools and drops hosted ones.
func (req *responsesRequest) parseTools(raw json.RawMessage) ([]json.RawMessage, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	list, aerr := rawArray(raw, "tools", "tools must be an array of tool objects", "tools", maxTools)
	if aerr != nil {
		return nil, aerr
	}
	var out []json.RawMessage
	for i, item := range list {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type        *string         `json:"type"`
			Name        *string         `json:"name"`
			Description json.RawMessage `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      json.RawMessage `json:"strict"`
		}
		if tr := bytes.TrimSpace(item); len(tr) == 0 || tr[0] != '{' || json.Unmarshal(tr, &t) != nil {
			return nil, invalidValue(param, "%s must be a tool object", param)
		}
		if t.Type == nil {
			return nil, invalidValue(param+".type", "%s.type is required", param)
		}
		if *t.Type != "function" {
			if !hostedToolTypes[*t.Type] {
				return nil, unsupported(param+".type", "tools of type %q are not supported (function tools are; hosted tools are dropped)", truncate(*t.Type, 40))
			}
			req.dropped = append(req.dropped, *t.Type)
			continue
		}
		if t.Name == nil || *t.Name == "" {
			return nil, invalidValue(param+".name", "%s.name is required", param)
		}
		fn := map[string]json.RawMessage{"name": marshalJSON(*t.Name)}
		for key, v := range map[string]json.RawMessage{"description": t.Description, "parameters": t.Parameters, "strict": t.Strict} {
			if !isNull(v) {
				fn[key] = v
			}
		}
		out = append(out, marshalJSON(map[string]any{"type": "function", "function": fn}))
		req.tools = append(req.tools, item)
	}
	return out, nil
}

// convertToolChoice turns a Responses tool_choice into the chat form.
func convertToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return raw, nil // "auto", "none", "required": the chat parser judges them
	}
	var c struct {
		Type  *string           `json:"type"`
		Name  *string           `json:"name"`
		Mode  json.RawMessage   `json:"mode"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Type == nil {
		return nil, invalidValue("tool_choice", "tool_choice must be a string or an object with a type")
	}
	switch *c.Type {
	case "function":
		if c.Name == nil || *c.Name == "" {
			return nil, invalidValue("tool_choice.name", "tool_choice.name is required for a function")
		}
		return marshalJSON(map[string]any{"type": "function", "function": map[string]string{"name": *c.Name}}), nil
	case "allowed_tools":
		var tools []any
		for i, t := range c.Tools {
			var ft struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if json.Unmarshal(t, &ft) != nil || ft.Type != "function" || ft.Name == "" {
				return nil, unsupported(fmt.Sprintf("tool_choice.tools[%d]", i), "allowed tools must be functions with a name")
			}
			tools = append(tools, map[string]any{"type": "function", "function": map[string]string{"name": ft.Name}})
		}
		return marshalJSON(map[string]any{"type": "allowed_tools",
			"allowed_tools": map[string]any{"mode": c.Mode, "tools": tools}}), nil
	}
	return nil, unsupported("tool_choice.type", "tool_choice of type %q names a hosted tool, which this server does not run", truncate(*c.Type, 40))
}

// convertTextFormat turns text.format into the chat response_format.
func convertTextFormat(raw json.RawMessage) (json.RawMessage, *apiError) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, invalidValue("text.format", "text.format must be an object with a type")
	}
	var typ string
	if json.Unmarshal(f["type"], &typ) != nil {
		return nil, invalidValue("text.format.type", "text.format.type is required")
	}
	if typ != "json_schema" {
		return marshalJSON(map[string]string{"type": typ}), nil
	}
	schema := map[string]json.RawMessage{}
	for _, key := range []string{"name", "schema", "strict", "description"} {
		if v, ok := f[key]; ok {
			schema[key] = v
		}
	}
	return marshalJSON(map[string]any{"type": "json_schema", "json_schema": schema}), nil
}

// responsesParam renames the params of errors found by the chat validation to the
// Responses fields they came from.
func responsesParam(e *apiError) *apiError {
	if e == nil || e.Param == "" {
		return e
	}
	renamed := *e
	for _, r := range [][2]string{
		{"max_completion_tokens", "max_output_tokens"},
		{"reasoning_effort", "reasoning.effort"},
		{"response_format.json_schema", "text.format"},
		{"response_format", "text.format"},
		{"messages", "input"},
	} {
		if strings.HasPrefix(e.Param, r[0]) {
			renamed.Param = r[1] + strings.TrimPrefix(e.Param, r[0])
			if r[0] == "messages" {
				renamed.Param = "input" // message positions do not map back to items
			}
			renamed.Message = strings.ReplaceAll(e.Message, r[0], r[1])
			break
		}
	}
	return &renamed
}
