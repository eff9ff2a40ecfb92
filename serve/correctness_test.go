package serve

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// C1: a minimal non-streamed chat completion has the spec's shape and exact usage.
func TestC1ChatNonStream(t *testing.T) {
	ts := startServer(t, nil)
	r := ts.chat(t, chatBody("Hello there", map[string]any{"max_tokens": 8,
		"chat_template_kwargs": map[string]any{"enable_thinking": false}}))
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || r.Created == 0 || r.Model != testModel {
		t.Fatalf("envelope: %+v", r)
	}
	if len(r.Choices) != 1 || r.Choices[0].Index != 0 || r.Choices[0].Message.Role != "assistant" {
		t.Fatalf("choices: %+v", r.Choices)
	}
	if string(r.Choices[0].Logprobs) != "null" {
		t.Fatalf("logprobs = %s, want null", r.Choices[0].Logprobs)
	}
	if r.Choices[0].Message.Content == nil {
		t.Fatal("content is null without tool calls")
	}
	tr := ts.lastTrace(t)
	u := r.Usage
	if u.CompletionTokens != len(tr.Result.Tokens) || u.PromptTokens != len(tr.Prompt) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v vs engine: prompt %d, generated %d", u, len(tr.Prompt), len(tr.Result.Tokens))
	}
	switch r.Choices[0].FinishReason {
	case "length":
		if u.CompletionTokens != 8 {
			t.Fatalf("finish length after %d tokens, want 8", u.CompletionTokens)
		}
	case "stop":
		if u.CompletionTokens > 8 {
			t.Fatalf("%d tokens > max_tokens", u.CompletionTokens)
		}
	default:
		t.Fatalf("finish_reason %q", r.Choices[0].FinishReason)
	}
	if r.Timings == nil || r.Timings.PredictedN != u.CompletionTokens || r.Timings.PromptN+r.Timings.CacheN != u.PromptTokens {
		t.Fatalf("timings %+v do not match usage %+v", r.Timings, u)
	}
}

// C2: the same request streamed: framing, role chunk, one finish, same text.
func TestC2ChatStreamEqualsNonStream(t *testing.T) {
	ts := startServer(t, nil)
	for _, thinking := range []bool{false, true} {
		body := chatBody("Tell me a story", map[string]any{"max_tokens": 10,
			"chat_template_kwargs": map[string]any{"enable_thinking": thinking}})
		want := ts.chat(t, body)
		got := ts.streamChat(t, body)
		first := got.chunks[0].Choices[0].Delta
		if string(first["role"]) != `"assistant"` || string(first["content"]) != `""` {
			t.Fatalf("first delta %v", first)
		}
		if got.content != want.content() || got.reasoning != want.reasoning() {
			t.Fatalf("thinking=%v: stream (%q, %q) != non-stream (%q, %q)", thinking, got.content, got.reasoning, want.content(), want.reasoning())
		}
		if got.finish != want.Choices[0].FinishReason {
			t.Fatalf("finish %q vs %q", got.finish, want.Choices[0].FinishReason)
		}
		if !strings.HasSuffix(got.raw, "data: [DONE]\n\n") {
			t.Fatalf("stream does not end with [DONE]: %q", got.raw[max(0, len(got.raw)-40):])
		}
	}
}

// C3: usage only when asked, as one extra chunk with no choices.
func TestC3StreamUsage(t *testing.T) {
	ts := startServer(t, nil)
	body := chatBody("Count to three", nil)
	withUsage := ts.streamChat(t, withField(body, "stream_options", map[string]any{"include_usage": true}))
	if withUsage.usage == nil {
		t.Fatal("no usage chunk with include_usage")
	}
	last := withUsage.chunks[len(withUsage.chunks)-1]
	if len(last.Choices) != 0 {
		t.Fatal("the usage chunk is not last")
	}
	for i, c := range withUsage.chunks[:len(withUsage.chunks)-1] {
		if !withUsage.hasUsage[i] || string(c.Usage) != "null" {
			t.Fatalf("chunk %d usage = %s, want null", i, c.Usage)
		}
	}
	tr := ts.lastTrace(t)
	if withUsage.usage.CompletionTokens != len(tr.Result.Tokens) || withUsage.usage.TotalTokens != withUsage.usage.PromptTokens+withUsage.usage.CompletionTokens {
		t.Fatalf("usage %+v", withUsage.usage)
	}
	for _, opts := range []any{map[string]any{"include_usage": false}, nil} {
		b := body
		if opts != nil {
			b = withField(body, "stream_options", opts)
		}
		r := ts.streamChat(t, b)
		if r.usage != nil {
			t.Fatal("usage chunk sent without include_usage")
		}
		for i := range r.chunks {
			if r.hasUsage[i] {
				t.Fatalf("chunk %d has a usage key without include_usage", i)
			}
		}
	}
}

func withField(body map[string]any, k string, v any) map[string]any {
	out := map[string]any{}
	for key, val := range body {
		out[key] = val
	}
	out[k] = v
	return out
}

// C4: max_completion_tokens wins over max_tokens; non-positive values are 400; an
// oversized value is clamped to the context.
func TestC4MaxTokens(t *testing.T) {
	ts := startServer(t, nil)
	r := ts.chat(t, chatBody("Go on", map[string]any{"max_completion_tokens": 5, "max_tokens": 50}))
	if r.Usage.CompletionTokens > 5 || (r.Choices[0].FinishReason == "length" && r.Usage.CompletionTokens != 5) {
		t.Fatalf("max_completion_tokens 5 gave %d tokens, finish %s", r.Usage.CompletionTokens, r.Choices[0].FinishReason)
	}
	for _, v := range []int{0, -1} {
		status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("x", map[string]any{"max_tokens": v}))
		wantError(t, status, hdr, data, 400, "max_tokens")
	}
	status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("x", map[string]any{"max_completion_tokens": 0}))
	wantError(t, status, hdr, data, 400, "max_completion_tokens")

	// 600 > the 512-token context: clamped to what is left after the prompt. Use a
	// server with a small context so running to the limit stays fast.
	small := startServer(t, func(c *Config) { c.Context = 96 })
	r = small.chat(t, chatBody("Fill the context", map[string]any{"max_tokens": 600}))
	left := 96 - r.Usage.PromptTokens
	if r.Choices[0].FinishReason == "length" && r.Usage.CompletionTokens != left {
		t.Fatalf("clamped generation made %d tokens, %d were left", r.Usage.CompletionTokens, left)
	}
	if r.Usage.CompletionTokens > left {
		t.Fatalf("%d tokens generated with %d left", r.Usage.CompletionTokens, left)
	}
}

// C5 (end to end): a stop string taken from the greedy output cuts it exactly, streamed
// and not, also when it spans a token boundary.
func TestC5StopStringEndToEnd(t *testing.T) {
	ts := startServer(t, nil)
	base := map[string]any{"model": testModel, "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0}
	full := completionText(t, ts, base)
	tr := ts.lastTrace(t)
	if len(tr.Result.Tokens) < 4 {
		t.Skipf("the model stopped after %d tokens; nothing to cut", len(tr.Result.Tokens))
	}
	// Choose a stop string spanning the boundary between two generated tokens, so that
	// the filter must hold back the first part.
	stop := ""
	for k := 1; k < len(tr.Result.Tokens) && stop == ""; k++ {
		prefix := ts.tok.Decode(tr.Result.Tokens[:k])
		if prefix == "" || !strings.HasPrefix(full, prefix) || len(prefix) == len(full) {
			continue
		}
		rest := full[len(prefix):]
		last, lastSize := utf8.DecodeLastRuneInString(prefix)
		first, firstSize := utf8.DecodeRuneInString(rest)
		if last == utf8.RuneError || first == utf8.RuneError {
			continue
		}
		stop = prefix[len(prefix)-lastSize:] + rest[:firstSize]
	}
	if stop == "" {
		t.Skipf("no token boundary between whole characters in %q", full)
	}
	want := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		body := withField(base, "stop", []string{stop})
		var got, finish string
		if stream {
			got, finish = streamCompletion(t, ts, body)
		} else {
			got, finish = completionTextFinish(t, ts, body)
		}
		if got != want || finish != "stop" {
			t.Fatalf("stream=%v stop %q: got %q (%s), want %q (stop)", stream, stop, got, finish, want)
		}
	}
	// The same stop string as a plain string instead of an array.
	got, finish := completionTextFinish(t, ts, withField(base, "stop", stop))
	if got != want || finish != "stop" {
		t.Fatalf("stop as a string: %q %s", got, finish)
	}
}

// C6 (end to end): every streamed delta is whole UTF-8 and the stream equals the
// non-streamed text, on the random model's raw byte output.
func TestC6StreamUTF8(t *testing.T) {
	ts := startServer(t, nil)
	body := map[string]any{"model": testModel, "prompt": "emoji 😀 and 中文", "max_tokens": 24, "temperature": 0}
	want, _ := completionTextFinish(t, ts, body)
	raw := rawStream(t, ts, "/v1/completions", withField(body, "stream", true))
	if !utf8.ValidString(raw) {
		t.Fatal("stream bytes are not valid UTF-8")
	}
	got, _ := foldCompletionStream(t, raw)
	if got != want {
		t.Fatalf("stream %q != non-stream %q", got, want)
	}
	// Each event's text is valid on its own (no character split across events).
	for _, e := range readSSE(t, strings.NewReader(raw)) {
		if e.comment || e.data == "[DONE]" {
			continue
		}
		var c streamChunk
		json.Unmarshal([]byte(e.data), &c)
		for _, ch := range c.Choices {
			if ch.Text != nil && strings.HasSuffix(*ch.Text, "\uFFFD") && !strings.Contains(want, *ch.Text) {
				t.Fatalf("event ends in a replacement character not in the full text: %q", *ch.Text)
			}
		}
	}
}

// C7: content parts behave like the concatenated string; developer is system.
func TestC7ContentPartsAndDeveloper(t *testing.T) {
	ts := startServer(t, nil)
	asString := ts.chat(t, map[string]any{"model": testModel, "max_tokens": 4, "temperature": 0,
		"messages": []any{map[string]any{"role": "system", "content": "Be brief."}, map[string]any{"role": "user", "content": "ab"}}})
	p1 := ts.lastTrace(t).Prompt
	asParts := ts.chat(t, map[string]any{"model": testModel, "max_tokens": 4, "temperature": 0,
		"messages": []any{
			map[string]any{"role": "developer", "content": []any{map[string]any{"type": "text", "text": "Be brief."}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "text", "text": "b"}}}}})
	p2 := ts.lastTrace(t).Prompt
	if !slices.Equal(p1, p2) {
		t.Fatalf("prompts differ:\n%v\n%v", p1, p2)
	}
	if asString.content() != asParts.content() || asString.reasoning() != asParts.reasoning() {
		t.Fatal("outputs differ")
	}
}

// C8: greedy and seeded sampling are reproducible; different seeds differ.
func TestC8Determinism(t *testing.T) {
	ts := startServer(t, nil)
	body := chatBody("Pick words", map[string]any{"max_tokens": 12})
	a, b := ts.chat(t, body), ts.chat(t, body)
	if a.reasoning()+a.content() != b.reasoning()+b.content() {
		t.Fatal("temperature 0 is not reproducible")
	}
	seeded := func(seed int) string {
		r := ts.chat(t, withField(withField(body, "temperature", 1.0), "seed", seed))
		return r.reasoning() + "|" + r.content()
	}
	if seeded(42) != seeded(42) {
		t.Fatal("seed 42 is not reproducible")
	}
	differs := false
	for _, s := range []int{1, 2, 3} {
		if seeded(s) != seeded(42) {
			differs = true
			break
		}
	}
	if !differs {
		t.Fatal("different seeds gave the same output every time")
	}
}

// C10: a tool-call round trip in the history renders and runs; a tool message without
// tool_call_id is a 400.
func TestC10ToolRoundTrip(t *testing.T) {
	ts := startServer(t, nil)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
	msgs := []any{
		map[string]any{"role": "user", "content": "Weather in Paris?"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
	}
	ts.chat(t, map[string]any{"model": testModel, "messages": msgs, "tools": tools, "max_tokens": 4, "temperature": 0})
	prompt := ts.tok.Decode(ts.lastTrace(t).Prompt)
	for _, want := range []string{"<function=get_weather>", "<parameter=city>\nParis\n</parameter>", "<tool_response>\nsunny\n</tool_response>", "get_weather"} {
		if !strings.Contains(prompt, want) {
			t.Fatalf("prompt lacks %q:\n%s", want, prompt)
		}
	}
	bad := []any{msgs[0], msgs[1], map[string]any{"role": "tool", "content": "sunny"}}
	status, hdr, data := ts.post(t, "/v1/chat/completions", map[string]any{"model": testModel, "messages": bad, "max_tokens": 4})
	wantError(t, status, hdr, data, 400, "messages[2].tool_call_id")
}

// C11: thinking output is reasoning_content only; off, there is none; a generation cut
// off mid-thought is all reasoning with finish "length".
func TestC11Thinking(t *testing.T) {
	ts := startServer(t, nil)
	on := ts.chat(t, chatBody("Think about it", map[string]any{"max_tokens": 8}))
	for _, s := range []string{on.content(), on.reasoning()} {
		if strings.Contains(s, "<think>") || strings.Contains(s, "</think>") {
			t.Fatalf("a think marker leaked: %q", s)
		}
	}
	tr := ts.lastTrace(t)
	closed := false
	for _, id := range tr.Result.Tokens {
		closed = closed || id == ts.thinkClose
	}
	if !closed {
		// The model never left the reasoning block: everything is reasoning.
		if on.content() != "" || on.Usage.CompletionTokensDetails == nil ||
			on.Usage.CompletionTokensDetails.ReasoningTokens != countNonStop(ts, tr.Result.Tokens) {
			t.Fatalf("unclosed thinking: content %q, usage %+v", on.content(), on.Usage)
		}
		if on.Choices[0].FinishReason == "length" && on.reasoning() == "" && strings.TrimSpace(ts.tok.Decode(tr.Result.Tokens)) != "" {
			t.Fatal("reasoning text lost")
		}
	}
	for _, off := range []map[string]any{
		{"chat_template_kwargs": map[string]any{"enable_thinking": false}},
		{"reasoning_effort": "none"},
	} {
		r := ts.chat(t, chatBody("Think about it", withField(off, "max_tokens", 8)))
		if r.Usage.CompletionTokensDetails == nil || r.Usage.CompletionTokensDetails.ReasoningTokens != 0 {
			t.Fatalf("%v: reasoning tokens %+v", off, r.Usage.CompletionTokensDetails)
		}
		if !strings.HasSuffix(ts.tok.Decode(ts.lastTrace(t).Prompt), "<think>\n\n</think>\n\n") {
			t.Fatalf("%v did not switch thinking off in the prompt", off)
		}
	}
}

func countNonStop(ts *testServer, ids []int32) int {
	n := 0
	for _, id := range ids {
		if !ts.stopTokens[id] {
			n++
		}
	}
	return n
}

// C12: the models endpoints.
func TestC12Models(t *testing.T) {
	ts := startServer(t, nil)
	for _, path := range []string{"/v1/models", "/models"} {
		status, _, data := ts.do(t, "GET", path, nil, nil)
		var list struct {
			Object string        `json:"object"`
			Data   []modelObject `json:"data"`
		}
		if status != 200 || json.Unmarshal(data, &list) != nil || list.Object != "list" || len(list.Data) != 1 ||
			list.Data[0].ID != testModel || list.Data[0].Object != "model" || list.Data[0].Created == 0 || list.Data[0].OwnedBy == "" {
			t.Fatalf("%s: %d %s", path, status, data)
		}
	}
	status, _, data := ts.do(t, "GET", "/v1/models/"+testModel, nil, nil)
	var m modelObject
	if status != 200 || json.Unmarshal(data, &m) != nil || m.ID != testModel {
		t.Fatalf("retrieve: %d %s", status, data)
	}
	status, hdr, data := ts.do(t, "GET", "/v1/models/nope", nil, nil)
	e := wantError(t, status, hdr, data, 404, "")
	if e.Error.Code == nil || *e.Error.Code != "model_not_found" {
		t.Fatalf("code %v", e.Error.Code)
	}
}

// C13: legacy completions, streamed and not; unsupported options are 400.
func TestC13Completions(t *testing.T) {
	ts := startServer(t, nil)
	body := map[string]any{"model": testModel, "prompt": "Hello", "max_tokens": 6, "temperature": 0}
	status, _, data := ts.post(t, "/v1/completions", body)
	var r textResponse
	if status != 200 || json.Unmarshal(data, &r) != nil || r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || len(r.Choices) != 1 {
		t.Fatalf("%d %s", status, data)
	}
	text, finish := streamCompletion(t, ts, body)
	if text != r.Choices[0].Text || finish != *r.Choices[0].FinishReason {
		t.Fatalf("stream %q %s != %q %s", text, finish, r.Choices[0].Text, *r.Choices[0].FinishReason)
	}
	// Without max_tokens the legacy default of 16 applies.
	status, _, data = ts.post(t, "/completions", map[string]any{"model": testModel, "prompt": "Hello", "temperature": 0})
	var d textResponse
	if status != 200 || json.Unmarshal(data, &d) != nil {
		t.Fatalf("%d %s", status, data)
	}
	if u := ts.lastTrace(t).Result.Tokens; len(u) > 16 || (*d.Choices[0].FinishReason == "length" && len(u) != 16) {
		t.Fatalf("default max_tokens: %d tokens", len(u))
	}
	for field, v := range map[string]any{"echo": true, "suffix": "x", "best_of": 2, "logprobs": 21} {
		status, hdr, data := ts.post(t, "/v1/completions", withField(body, field, v))
		wantError(t, status, hdr, data, 400, field)
	}
}

// C14: bad logprobs requests are a clear 400 naming the field, and the server stays
// healthy (the values themselves: structured_test.go).
func TestC14Logprobs(t *testing.T) {
	ts := startServer(t, nil)
	cases := []struct {
		extra map[string]any
		param string
	}{
		{map[string]any{"logprobs": true, "top_logprobs": 21}, "top_logprobs"},
		{map[string]any{"top_logprobs": 3}, "top_logprobs"},
		{map[string]any{"top_logprobs": 21}, "top_logprobs"},
		{map[string]any{"logprobs": "yes"}, "logprobs"},
	}
	for _, c := range cases {
		status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("x", c.extra))
		wantError(t, status, hdr, data, 400, c.param)
	}
	ts.chat(t, chatBody("still fine?", nil))
}

func completionText(t *testing.T, ts *testServer, body map[string]any) string {
	text, _ := completionTextFinish(t, ts, body)
	return text
}

func completionTextFinish(t *testing.T, ts *testServer, body map[string]any) (string, string) {
	t.Helper()
	status, _, data := ts.post(t, "/v1/completions", body)
	var r textResponse
	if status != 200 || json.Unmarshal(data, &r) != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == nil {
		t.Fatalf("%d %s", status, data)
	}
	return r.Choices[0].Text, *r.Choices[0].FinishReason
}

func rawStream(t *testing.T, ts *testServer, path string, body map[string]any) string {
	t.Helper()
	status, hdr, data := ts.post(t, path, body)
	if status != 200 || hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", status, data)
	}
	return string(data)
}

func streamCompletion(t *testing.T, ts *testServer, body map[string]any) (string, string) {
	t.Helper()
	return foldCompletionStream(t, rawStream(t, ts, "/v1/completions", withField(body, "stream", true)))
}

func foldCompletionStream(t *testing.T, raw string) (string, string) {
	t.Helper()
	var text, finish string
	finishes := 0
	for _, e := range readSSE(t, strings.NewReader(raw)) {
		if e.comment || e.data == "[DONE]" {
			continue
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(e.data), &c); err != nil || c.Object != "text_completion" {
			t.Fatalf("chunk %s", e.data)
		}
		for _, ch := range c.Choices {
			if ch.Text != nil {
				text += *ch.Text
			}
			if ch.FinishReason != nil {
				finishes++
				finish = *ch.FinishReason
			}
		}
	}
	if finishes != 1 {
		t.Fatalf("%d finish reasons", finishes)
	}
	return text, finish
}
