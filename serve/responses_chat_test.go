package serve

import (
	"encoding/json"
	"strings"
	"testing"

	"pistil/models/chat"
)

// The chat-side changes of issue 15: reasoning beside reasoning_content, the server's
// thinking default, the context length on /v1/models.
func TestThinkingDefaultAndReasoningField(t *testing.T) {
	off := false
	ts := startServer(t, func(c *Config) { c.Thinking = &off })
	plain := ts.chat(t, chatBody("Think about it", nil))
	if !strings.HasSuffix(ts.tok.Decode(ts.lastTrace(t).Prompt), "<think>\n\n</think>\n\n") || plain.Usage.CompletionTokensDetails.ReasoningTokens != 0 {
		t.Fatalf("a request that says nothing thought although the server default is off")
	}
	status, _, data := ts.post(t, "/v1/chat/completions", chatBody("Think about it", map[string]any{"reasoning_effort": "high", "max_tokens": 8}))
	var raw struct {
		Choices []struct {
			Message map[string]json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if status != 200 || json.Unmarshal(data, &raw) != nil {
		t.Fatalf("%d %s", status, data)
	}
	m := raw.Choices[0].Message
	if len(m["reasoning_content"]) < 3 || string(m["reasoning"]) != string(m["reasoning_content"]) {
		t.Fatalf("reasoning %s, reasoning_content %s", m["reasoning"], m["reasoning_content"])
	}
	// Streamed, foldChatStream checks every delta's reasoning equals its reasoning_content.
	s := ts.streamChat(t, chatBody("Think about it", map[string]any{"reasoning_effort": "high", "max_tokens": 8}))
	if !strings.Contains(s.raw, `"reasoning":"`) || s.reasoning == "" {
		t.Fatalf("no reasoning deltas: %s", s.raw)
	}
}

func TestModelsCarryContextLength(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Context = 1536 })
	status, _, data := ts.do(t, "GET", "/v1/models/"+testModel, nil, nil)
	var m map[string]any
	if status != 200 || json.Unmarshal(data, &m) != nil {
		t.Fatalf("%d %s", status, data)
	}
	meta, _ := m["meta"].(map[string]any)
	if m["context_length"] != 1536.0 || m["max_model_len"] != 1536.0 || meta == nil ||
		meta["n_ctx_train"] != float64(tiny.model.Config().MaxPositionEmbeddings) {
		t.Fatalf("model object %s", data)
	}
}

// An unfinished tool call at the end of generation (the "<tool_call><|repo_name|>",
// tokens of the real tokenizer) never reaches content, in chat or Responses output; a
// named one is reported as a call.
func TestUnterminatedToolCallIsNotContent(t *testing.T) {
	tok := tinyTokenizer(t)
	for _, c := range []struct {
		output, content, call string
	}{
		{"The answer.\n\n<tool_call><|repo_name|>", "The answer.", ""},
		{"<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "", "get_weather"},
	} {
		p := newPipeline(tok.NewStreamDecoder(), nil, chatParser{chat.NewParser(chat.ParserOptions{ParseTools: true})})
		x := &exchange{p: &prepared{chat: true}, callIndex: map[int]int{}, announced: map[int]bool{}}
		b := newResponsesBuilder()
		for _, id := range tok.Encode(c.output) {
			ds, _ := p.push(id)
			x.collect(ds)
			b.push(ds)
		}
		ds := p.finish()
		x.collect(ds)
		b.push(ds)
		b.finish("completed")
		if x.content.String() != c.content || strings.Contains(x.content.String(), "<") {
			t.Fatalf("%q: content %q", c.output, x.content.String())
		}
		if (c.call == "") != (len(x.calls) == 0) || (c.call != "" && x.calls[0].Function.Name != c.call) {
			t.Fatalf("%q: calls %+v", c.output, x.calls)
		}
		for _, it := range b.items {
			if m, ok := it.(*messageItem); ok && strings.Contains(m.Content[0].Text, "<") {
				t.Fatalf("%q: markup in the Responses message %q", c.output, m.Content[0].Text)
			}
		}
	}
}
