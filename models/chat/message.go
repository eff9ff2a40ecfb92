// Package chat renders a checkpoint's own Jinja chat template exactly as transformers'
// apply_chat_template does, and parses model output back into reasoning, content and tool
// calls (streaming).
package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Message is one chat turn in OpenAI form.
type Message struct {
	Role string `json:"role"`
	// Content is a string, a []ContentPart, or nil.
	Content          any        `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
	Name             string     `json:"name,omitempty"`
}

// ContentPart is one element of a multi-part content list.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
	VideoURL *ImageURL `json:"video_url,omitempty"`
}

// ImageURL is the OpenAI image reference.
type ImageURL struct {
	URL string `json:"url"`
}

// ToolCall is a call the assistant made.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as JSON object text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// UnmarshalJSON accepts arguments either as a JSON string holding an object (OpenAI) or as
// an object itself (what transformers' examples pass); the object's text is kept verbatim
// so its key order survives into the rendered prompt.
func (f *FunctionCall) UnmarshalJSON(data []byte) error {
	var raw struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	f.Name = raw.Name
	args := bytes.TrimSpace(raw.Arguments)
	switch {
	case len(args) == 0 || bytes.Equal(args, []byte("null")):
		f.Arguments = ""
	case args[0] == '"':
		if err := json.Unmarshal(args, &f.Arguments); err != nil {
			return fmt.Errorf("function %q arguments: %w", raw.Name, err)
		}
	case args[0] == '{':
		f.Arguments = string(args)
	default:
		return fmt.Errorf("function %q arguments: want an object or a string holding one, got %s", raw.Name, args)
	}
	return nil
}

// UnmarshalJSON decodes content as a string, null, or a list of parts.
func (m *Message) UnmarshalJSON(data []byte) error {
	type plain Message
	var raw struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = Message(raw.plain)
	content := bytes.TrimSpace(raw.Content)
	switch {
	case len(content) == 0 || bytes.Equal(content, []byte("null")):
		m.Content = nil
	case content[0] == '"':
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return fmt.Errorf("message content: %w", err)
		}
		m.Content = s
	case content[0] == '[':
		var parts []ContentPart
		if err := json.Unmarshal(content, &parts); err != nil {
			return fmt.Errorf("message content parts: %w", err)
		}
		m.Content = parts
	default:
		return fmt.Errorf("message content: want a string, null or a list of parts, got %s", content)
	}
	return nil
}

// ContentText is the message's text: a string as is, text parts concatenated.
func (m *Message) ContentText() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []ContentPart:
		var b bytes.Buffer
		for _, p := range c {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}
