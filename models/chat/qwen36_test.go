package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"pistil/models/tokenizer"
)

// synthetic writes the synthetic tokenizer (with the Qwen3.6 template) and loads both.
func synthetic(t *testing.T) (*Template, *tokenizer.Tokenizer) {
	t.Helper()
	dir := t.TempDir()
	if err := tokenizer.WriteSynthetic(dir, 512); err != nil {
		t.Fatal(err)
	}
	tmpl, err := LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl, tok
}

func boolPtr(b bool) *bool { return &b }

func strPtr(s string) *string { return &s }

// TestQwen36SpecExamples renders the examples of model-spec.md §5.4 with the template
// WriteSynthetic embeds.
func TestQwen36SpecExamples(t *testing.T) {
	tmpl, _ := synthetic(t)
	sysUser := []Message{{Role: "system", Content: "You are a helpful assistant."}, {Role: "user", Content: "Hello!"}}
	toolTurn := []Message{
		{Role: "user", Content: "What is 2+3?"},
		{Role: "assistant", Content: "Let me compute.", ToolCalls: []ToolCall{{Type: "function", Function: FunctionCall{Name: "add", Arguments: `{"a": 2, "b": 3}`}}}},
		{Role: "tool", Content: "5"},
	}
	cases := []struct {
		name string
		opts RenderOptions
		want string
	}{
		{"thinking on", RenderOptions{Messages: sysUser, AddGenerationPrompt: true},
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n"},
		{"thinking off", RenderOptions{Messages: sysUser, AddGenerationPrompt: true, EnableThinking: boolPtr(false)},
			"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"tool call and response", RenderOptions{Messages: toolTurn},
			"<|im_start|>user\nWhat is 2+3?<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\nLet me compute.\n\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"},
		{"empty system without tools is still emitted", RenderOptions{Messages: []Message{{Role: "system", Content: ""}, {Role: "user", Content: "x"}}},
			"<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"},
		{"reasoning before the last query is dropped", RenderOptions{Messages: []Message{
			{Role: "user", Content: "Pick a number."},
			{Role: "assistant", Content: "<think>\nAny works.\n</think>\n\nSeven."},
			{Role: "user", Content: "Double it."},
			{Role: "assistant", Content: "Fourteen.", ReasoningContent: strPtr("\n7*2\n")},
		}},
			"<|im_start|>user\nPick a number.<|im_end|>\n<|im_start|>assistant\nSeven.<|im_end|>\n<|im_start|>user\nDouble it.<|im_end|>\n<|im_start|>assistant\n<think>\n7*2\n</think>\n\nFourteen.<|im_end|>\n"},
		{"preserve_thinking keeps it", RenderOptions{PreserveThinking: boolPtr(true), Messages: []Message{
			{Role: "user", Content: "Pick a number."},
			{Role: "assistant", Content: "<think>\nAny works.\n</think>\n\nSeven."},
			{Role: "user", Content: "Double it."},
		}},
			"<|im_start|>user\nPick a number.<|im_end|>\n<|im_start|>assistant\n<think>\nAny works.\n</think>\n\nSeven.<|im_end|>\n<|im_start|>user\nDouble it.<|im_end|>\n"},
		{"3.6 arguments: strings raw, others tojson", RenderOptions{Messages: []Message{
			{Role: "user", Content: "go"},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{
				{Function: FunctionCall{Name: "f", Arguments: `{"s": "a b", "o": {"k": [1, "é"]}, "n": null, "t": true}`}},
				{Function: FunctionCall{Name: "g", Arguments: `{}`}},
			}},
			{Role: "tool", Content: "r1"}, {Role: "tool", Content: "r2"},
		}},
			"<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=f>\n<parameter=s>\na b\n</parameter>\n<parameter=o>\n{\"k\": [1, \"é\"]}\n</parameter>\n<parameter=n>\nnull\n</parameter>\n<parameter=t>\ntrue\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"},
		{"content parts", RenderOptions{Messages: []Message{{Role: "user", Content: []ContentPart{{Type: "text", Text: " look: "}, {Type: "image_url", ImageURL: &ImageURL{URL: "x.png"}}, {Type: "text", Text: "ok "}}}}},
			"<|im_start|>user\nlook: <|vision_start|><|image_pad|><|vision_end|>ok<|im_end|>\n"},
	}
	for _, c := range cases {
		got, err := tmpl.Render(c.opts)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestQwen36Tools(t *testing.T) {
	tmpl, _ := synthetic(t)
	tool := json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}`)
	got, err := tmpl.Render(RenderOptions{
		Messages: []Message{{Role: "system", Content: "  Be brief.  "}, {Role: "user", Content: "Jakarta?"}},
		Tools:    []json.RawMessage{tool}, AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	wantStart := "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n" +
		`{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & later", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
		"\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n"
	wantEnd := "do not tell the user about function calls\n</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nJakarta?<|im_end|>\n<|im_start|>assistant\n<think>\n"
	if !strings.HasPrefix(got, wantStart) || !strings.HasSuffix(got, wantEnd) {
		t.Fatalf("rendered %q", got)
	}
}

// TestTemplateErrors: the template's own raise_exception messages come back with the line.
func TestTemplateErrors(t *testing.T) {
	tmpl, _ := synthetic(t)
	cases := []struct {
		msgs []Message
		want string
	}{
		{nil, "No messages provided."},
		{[]Message{{Role: "assistant", Content: "hi"}}, "No user query found in messages."},
		{[]Message{{Role: "user", Content: "<tool_response>x</tool_response>"}}, "No user query found in messages."},
		{[]Message{{Role: "user", Content: "a"}, {Role: "system", Content: "b"}}, "System message must be at the beginning."},
		{[]Message{{Role: "user", Content: "a"}, {Role: "robot", Content: "b"}}, "Unexpected message role."},
	}
	for _, c := range cases {
		_, err := tmpl.Render(RenderOptions{Messages: c.msgs})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "chat template line ") {
			t.Errorf("messages %+v: error %v, want line and %q", c.msgs, err, c.want)
		}
	}
}

// TestThinkingByDefault: the Qwen3.6 prompt opens <think>, the Qwen3 one does not.
func TestThinkingByDefault(t *testing.T) {
	tmpl36, _ := synthetic(t)
	if !tmpl36.ThinkingByDefault() {
		t.Error("Qwen3.6 template should start in reasoning")
	}
	tmpl3, err := LoadTemplate(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl3.ThinkingByDefault() {
		t.Error("Qwen3 template's prompt does not open <think>")
	}
	off, err := tmpl36.Render(RenderOptions{Messages: []Message{{Role: "user", Content: "x"}}, AddGenerationPrompt: true, EnableThinking: boolPtr(false)})
	if err != nil || PromptEndsInReasoning(off) {
		t.Errorf("thinking off: %q %v", off, err)
	}
}

// TestRenderParseRoundTrip: an assistant turn rendered by the Qwen3.6 template, parsed
// back, gives the same reasoning, content and tool calls; and its tokens use the added
// tokens of the synthetic tokenizer.
func TestRenderParseRoundTrip(t *testing.T) {
	tmpl, tok := synthetic(t)
	calls := []ToolCall{
		{Type: "function", Function: FunctionCall{Name: "search", Arguments: `{"query": "weather in Jakarta", "limit": 5, "filters": {"lang": ["id", "en"]}}`}},
		{Type: "function", Function: FunctionCall{Name: "now", Arguments: `{}`}},
	}
	msgs := []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Looking it up.", ReasoningContent: strPtr("Need data."), ToolCalls: calls}}
	prefix, err := tmpl.Render(RenderOptions{Messages: msgs[:1], AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	full, err := tmpl.Render(RenderOptions{Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(full, prefix) {
		t.Fatalf("history %q does not extend the prompt %q", full, prefix)
	}
	output := strings.TrimSuffix(full[len(prefix):], "<|im_end|>\n")
	ids := tok.Encode(output)
	sd := tok.NewStreamDecoder()
	p := NewParser(ParserOptions{StartInReasoning: PromptEndsInReasoning(prefix), ParseTools: true})
	var deltas []Delta
	for _, id := range ids { // token by token, as a server streams
		deltas = append(deltas, p.Push(sd.Push(id))...)
	}
	deltas = append(deltas, p.Push(sd.Flush())...)
	deltas = append(deltas, p.Finish()...)
	got := assemble(t, deltas)
	want := parsed{Reasoning: "Need data.", Content: "Looking it up.", Calls: calls}
	if got.Reasoning != want.Reasoning || got.Content != want.Content || len(got.Calls) != 2 ||
		got.Calls[0].Function != calls[0].Function || got.Calls[1].Function != calls[1].Function {
		t.Fatalf("parsed %+v\nwant %+v", got, want)
	}
	thinkClose, _ := tok.TokenID("</think>")
	found := false
	for _, id := range ids {
		found = found || id == thinkClose
	}
	if !found {
		t.Fatal("</think> was not encoded as its added token")
	}
}
