package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// parseChatRequest decodes and validates a /v1/chat/completions body. Every problem is a
// 400 whose param names the offending field, e.g. "messages[2].content".
func parseChatRequest(body []byte) (*chatRequest, *apiError) {
	var raw rawChat
	if e := decodeObject(body, &raw); e != nil {
		return nil, e
	}
	g, e := parseCommon(&raw.rawCommon, 0)
	if e != nil {
		return nil, e
	}
	req := &chatRequest{genRequest: g}

	req.Logprobs = raw.Logprobs != nil && *raw.Logprobs
	if !isNull(raw.TopLogprobs) {
		n, err := parseInt(raw.TopLogprobs)
		if err != nil || n < 0 || n > 20 {
			return nil, invalidValue("top_logprobs", "top_logprobs must be an integer between 0 and 20")
		}
		if !req.Logprobs {
			return nil, invalidValue("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		req.TopLogprobs = int(n)
	}
	if req.Constraint, e = parseResponseFormat(raw.ResponseFormat); e != nil {
		return nil, e
	}

	if req.Messages, e = parseMessages(raw.Messages); e != nil {
		return nil, e
	}
	if req.Tools, e = parseTools(raw.Tools); e != nil {
		return nil, e
	}
	choice, e := parseToolChoice(raw.ToolChoice)
	if e != nil {
		return nil, e
	}
	req.ToolsEnabled = len(req.Tools) > 0 && choice.Mode != "none"
	parallel := raw.ParallelToolCalls == nil || *raw.ParallelToolCalls
	if choice.forced() {
		if req.Constraint != nil {
			return nil, invalidValue("tool_choice", "tool_choice %q and response_format cannot both constrain the output", choice.Mode)
		}
		if req.Constraint, e = toolChoiceConstraint(choice, req.Tools, parallel); e != nil {
			return nil, e
		}
	}
	if e := checkConstraint(&req.genRequest, req.Constraint); e != nil {
		return nil, e
	}

	if raw.ReasoningEffort != nil {
		switch *raw.ReasoningEffort {
		case "none":
			off := false
			req.EnableThinking = &off
		case "minimal", "low", "medium", "high", "xhigh":
			on := true
			req.EnableThinking = &on
		default:
			return nil, invalidValue("reasoning_effort",
				"reasoning_effort must be one of none, minimal, low, medium, high, xhigh; got %q", truncate(*raw.ReasoningEffort, 40))
		}
	}
	if !isNull(raw.ChatTemplateKwargs) {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(raw.ChatTemplateKwargs, &kw); err != nil {
			return nil, invalidValue("chat_template_kwargs", "chat_template_kwargs must be an object")
		}
		for key, val := range kw {
			switch key {
			case "enable_thinking", "preserve_thinking":
				var b bool
				if err := json.Unmarshal(val, &b); err != nil {
					return nil, invalidValue("chat_template_kwargs."+key, "%s must be a boolean", key)
				}
				if key == "enable_thinking" {
					req.EnableThinking = &b
				} else {
					req.Preserve = &b
				}
			default:
				return nil, unsupported("chat_template_kwargs."+key,
					"chat_template_kwargs.%s is not supported (enable_thinking and preserve_thinking are)", truncate(key, 64))
			}
		}
	}
	return req, nil
}

func parseTools(raw json.RawMessage) ([]toolDef, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	list, aerr := rawArray(raw, "tools", "tools must be an array of tool objects", "tools", maxTools)
	if aerr != nil {
		return nil, aerr
	}
	tools := make([]toolDef, 0, len(list))
	for i, item := range list {
		param := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type     *string `json:"type"`
			Function *struct {
				Name       *string         `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(item, &t); err != nil || bytes.TrimSpace(item)[0] != '{' {
			return nil, invalidValue(param, "%s must be an object", param)
		}
		if t.Type == nil || *t.Type != "function" {
			return nil, unsupported(param+".type", "only tools of type \"function\" are supported")
		}
		if t.Function == nil || t.Function.Name == nil || *t.Function.Name == "" {
			return nil, invalidValue(param+".function.name", "%s.function.name is required", param)
		}
		if len(*t.Function.Name) > maxToolName {
			return nil, invalidValue(param+".function.name", "tool names may be at most %d bytes", maxToolName)
		}
		if !isNull(t.Function.Parameters) && bytes.TrimSpace(t.Function.Parameters)[0] != '{' {
			return nil, invalidValue(param+".function.parameters", "function parameters must be a JSON Schema object")
		}
		tools = append(tools, toolDef{Name: *t.Function.Name, Raw: item})
	}
	return tools, nil
}

type rawMessage struct {
	Role             *string         `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	ToolCallID       *string         `json:"tool_call_id"`
	Name             *string         `json:"name"`
}

func parseMessages(raw json.RawMessage) ([]chatMessage, *apiError) {
	if isNull(raw) {
		return nil, badRequest("messages", "missing_required_parameter", "messages is required")
	}
	list, aerr := rawArray(raw, "messages", "messages must be an array of message objects", "messages", maxMessages)
	if aerr != nil {
		return nil, aerr
	}
	if len(list) == 0 {
		return nil, invalidValue("messages", "[] is too short - 'messages' must hold at least one message")
	}
	out := make([]chatMessage, 0, len(list))
	for i, item := range list {
		m, e := parseMessage(i, item)
		if e != nil {
			return nil, e
		}
		out = append(out, m)
	}
	return out, nil
}

func parseMessage(i int, item json.RawMessage) (chatMessage, *apiError) {
	param := fmt.Sprintf("messages[%d]", i)
	var m chatMessage
	t := bytes.TrimSpace(item)
	if len(t) == 0 || t[0] != '{' {
		return m, invalidValue(param, "%s must be an object", param)
	}
	var rm rawMessage
	if err := json.Unmarshal(t, &rm); err != nil {
		return m, invalidValue(param, "%s is malformed: %s", param, typeErrorText(err))
	}
	if rm.Role == nil {
		return m, invalidValue(param+".role", "%s.role is required", param)
	}
	role := *rm.Role
	if role == "developer" {
		role = "system" // Qwen has no developer role; OpenAI treats it as the system prompt
	}
	switch role {
	case "system", "user", "assistant", "tool":
	default:
		return m, invalidValue(param+".role", "%s.role must be system, developer, user, assistant or tool; got %q", param, truncate(role, 40))
	}
	m.Role = role
	if rm.Name != nil {
		m.Name = *rm.Name
	}

	content, e := parseContent(param+".content", rm.Content)
	if e != nil {
		return m, e
	}
	m.Content = content

	switch role {
	case "assistant":
		if rm.ReasoningContent != nil {
			m.ReasoningContent = rm.ReasoningContent
		} else if rm.Reasoning != nil {
			m.ReasoningContent = rm.Reasoning
		}
		calls, e := parseToolCallsIn(param+".tool_calls", rm.ToolCalls)
		if e != nil {
			return m, e
		}
		m.ToolCalls = calls
		if m.Content == nil && len(calls) == 0 && m.ReasoningContent == nil {
			return m, invalidValue(param+".content", "%s.content is required unless tool_calls are given", param)
		}
	case "tool":
		if rm.ToolCallID == nil || *rm.ToolCallID == "" {
			return m, invalidValue(param+".tool_call_id", "%s.tool_call_id is required for tool messages", param)
		}
		m.ToolCallID = *rm.ToolCallID
		if m.Content == nil {
			return m, invalidValue(param+".content", "%s.content is required", param)
		}
	default:
		if m.Content == nil {
			return m, invalidValue(param+".content", "%s.content is required", param)
		}
	}
	return m, nil
}

// parseContent accepts a string or an array of text parts; the parts are concatenated
// with no joiner, as the Qwen template does. null gives nil.
func parseContent(param string, raw json.RawMessage) (*string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return &s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, invalidValue(param, "invalid message content type: %s must be a string or an array of text parts", param)
	}
	if len(parts) == 0 {
		return nil, invalidValue(param, "%s: [] is too short - an array of content parts must hold at least one part", param)
	}
	var b strings.Builder
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var part struct {
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(p, &part); err != nil || bytes.TrimSpace(p)[0] != '{' {
			return nil, invalidValue(pp, "%s must be a content part object", pp)
		}
		if part.Type == nil {
			return nil, invalidValue(pp+".type", "%s.type is required", pp)
		}
		switch *part.Type {
		case "text":
			if part.Text == nil {
				return nil, invalidValue(pp+".text", "%s.text is required for a text part", pp)
			}
			b.WriteString(*part.Text)
		case "image_url", "input_audio", "file", "input_image", "video_url":
			return nil, unsupported(pp+".type", "content parts of type %q are not supported: this model serves text only", *part.Type)
		default:
			return nil, invalidValue(pp+".type", "unknown content part type %q", truncate(*part.Type, 40))
		}
	}
	s = b.String()
	return &s, nil
}

func parseToolCallsIn(param string, raw json.RawMessage) ([]toolCallIn, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var list []struct {
		ID       *string `json:"id"`
		Type     *string `json:"type"`
		Function *struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidValue(param, "%s must be an array of tool calls", param)
	}
	out := make([]toolCallIn, 0, len(list))
	for j, c := range list {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if c.Function == nil || c.Function.Name == nil || *c.Function.Name == "" {
			return nil, invalidValue(pp+".function.name", "%s.function.name is required", pp)
		}
		call := toolCallIn{Name: *c.Function.Name, Arguments: "{}"}
		if c.ID != nil {
			call.ID = *c.ID
		}
		if !isNull(c.Function.Arguments) {
			// OpenAI sends arguments as a JSON string holding an object; some clients
			// send the object itself. Both must hold a JSON object.
			var s string
			argText := string(c.Function.Arguments)
			if err := json.Unmarshal(c.Function.Arguments, &s); err == nil {
				argText = s
			}
			var obj map[string]json.RawMessage
			if strings.TrimSpace(argText) == "" {
				argText = "{}"
			} else if err := json.Unmarshal([]byte(argText), &obj); err != nil {
				return nil, invalidValue(pp+".function.arguments", "%s.function.arguments must be a JSON object (as a string)", pp)
			}
			call.Arguments = argText
		}
		out = append(out, call)
	}
	return out, nil
}

func typeErrorText(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("field %s has the wrong type (JSON %s)", te.Field, te.Value)
	}
	return err.Error()
}

// parseCompletionRequest decodes and validates a legacy /v1/completions body.
func parseCompletionRequest(body []byte) (*completionRequest, *apiError) {
	var raw rawCompletion
	if e := decodeObject(body, &raw); e != nil {
		return nil, e
	}
	// The legacy endpoint defaults max_tokens to 16 (the spec's default).
	g, e := parseCommon(&raw.rawCommon, 16)
	if e != nil {
		return nil, e
	}
	req := &completionRequest{genRequest: g, ParseSpecial: raw.ParseSpecial == nil || *raw.ParseSpecial}
	if raw.Echo != nil && *raw.Echo {
		return nil, unsupported("echo", "echo is not supported")
	}
	if raw.Suffix != nil && *raw.Suffix != "" {
		return nil, unsupported("suffix", "suffix is not supported")
	}
	if raw.BestOf != nil && *raw.BestOf != 1 {
		return nil, unsupported("best_of", "best_of other than 1 is not supported")
	}
	if !isNull(raw.Logprobs) {
		// The legacy API's logprobs is the number of alternatives per token (up to 5 in
		// OpenAI's; up to 20 here, as in chat).
		n, err := parseInt(raw.Logprobs)
		if err != nil || n < 0 || n > 20 {
			return nil, invalidValue("logprobs", "logprobs must be an integer between 0 and 20")
		}
		req.Logprobs, req.TopLogprobs = true, int(n)
	}
	c, e := parseResponseFormat(raw.ResponseFormat)
	if e != nil {
		return nil, e
	}
	if e := checkConstraint(&req.genRequest, c); e != nil {
		return nil, e
	}
	req.Constraint = c
	if isNull(raw.Prompt) {
		return nil, badRequest("prompt", "missing_required_parameter", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw.Prompt, &s); err == nil {
		req.Prompt = s
		return req, nil
	}
	var ids []int64
	err := json.Unmarshal(raw.Prompt, &ids)
	if err != nil {
		// A batch of one token-id prompt is the same request as its one prompt.
		var batch [][]int64
		if json.Unmarshal(raw.Prompt, &batch) == nil && len(batch) == 1 {
			ids, err = batch[0], nil
		}
	}
	if err == nil && len(ids) == 0 {
		return nil, invalidValue("prompt", "prompt must not be empty")
	}
	if err == nil {
		req.PromptTokens = make([]int32, len(ids))
		for i, id := range ids {
			if id < 0 || id > 1<<31-1 {
				return nil, invalidValue(fmt.Sprintf("prompt[%d]", i), "token id %d is out of range", id)
			}
			req.PromptTokens[i] = int32(id)
		}
		return req, nil
	}
	var list []string
	if err := json.Unmarshal(raw.Prompt, &list); err == nil {
		if len(list) == 1 {
			req.Prompt = list[0]
			return req, nil
		}
		return nil, unsupported("prompt", "a batch of %d prompts is not supported; send one prompt per request", len(list))
	}
	return nil, invalidValue("prompt", "prompt must be a string, an array of one string, or an array of token ids")
}

// rawArray decodes the request parameter param as a JSON array of at most limit items,
// each kept raw for its own parsing: notArray is the error when it is not an array, and
// noun names its items in the error when there are too many.
func rawArray(raw json.RawMessage, param, notArray, noun string, limit int) ([]json.RawMessage, *apiError) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidValue(param, "%s", notArray)
	}
	if len(list) > limit {
		return nil, invalidValue(param, "at most %d %s are allowed, got %d", limit, noun, len(list))
	}
	return list, nil
}
