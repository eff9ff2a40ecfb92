package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"pistil/exec"
	"pistil/models/chat"
)

// responsesSchema is the published spec's required fields and types for the objects and
// events the Responses API emits (testdata/responses_schema.json, extracted from
// openai/openai-openapi by testdata/responses_schema.py).
type schemaEntry struct {
	Required []string            `json:"required"`
	Types    map[string][]string `json:"types"`
	Type     string              `json:"type"`
}

var responsesSchema = sync.OnceValues(func() (map[string]schemaEntry, error) {
	data, err := os.ReadFile("testdata/responses_schema.json")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Schemas map[string]schemaEntry `json:"schemas"`
	}
	return doc.Schemas, json.Unmarshal(data, &doc)
})

func schemaFor(t testing.TB, name string) schemaEntry {
	t.Helper()
	all, err := responsesSchema()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := all[name]
	if !ok {
		t.Fatalf("no schema %s", name)
	}
	return e
}

// eventSchemas maps an event type to its schema name.
func eventSchema(t testing.TB, typ string) string {
	all, _ := responsesSchema()
	for name, e := range all {
		if e.Type == typ && strings.HasSuffix(name, "Event") {
			return name
		}
	}
	t.Fatalf("event type %q is not one the spec defines", typ)
	return ""
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// conforms checks obj against the named schema: every required field present, every
// field of a known type one of the types the spec allows.
func conforms(t testing.TB, name string, obj map[string]any) {
	t.Helper()
	s := schemaFor(t, name)
	for _, f := range s.Required {
		if _, ok := obj[f]; !ok {
			t.Fatalf("%s lacks required field %q: %v", name, f, obj)
		}
	}
	if s.Type != "" && obj["type"] != nil && obj["type"] != s.Type {
		t.Fatalf("%s has type %v", name, obj["type"])
	}
	for f, v := range obj {
		allowed, ok := s.Types[f]
		if !ok || slicesContains(allowed, "any") {
			continue
		}
		got := jsonType(v)
		if !slicesContains(allowed, got) && !(got == "integer" && slicesContains(allowed, "number")) {
			t.Fatalf("%s.%s is %s, the spec allows %v", name, f, got, allowed)
		}
	}
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// conformsResponse checks a whole response object and its items.
func conformsResponse(t testing.TB, r map[string]any) {
	t.Helper()
	conforms(t, "Response", r)
	if u, ok := r["usage"].(map[string]any); ok {
		conforms(t, "ResponseUsage", u)
	}
	for _, it := range r["output"].([]any) {
		conformsItem(t, it.(map[string]any))
	}
}

func conformsItem(t testing.TB, item map[string]any) {
	t.Helper()
	switch item["type"] {
	case "message":
		conforms(t, "OutputMessage", item)
		for _, p := range item["content"].([]any) {
			conforms(t, "OutputTextContent", p.(map[string]any))
		}
	case "reasoning":
		conforms(t, "ReasoningItem", item)
		for _, p := range item["summary"].([]any) {
			conforms(t, "SummaryTextContent", p.(map[string]any))
		}
		for _, p := range item["content"].([]any) {
			conforms(t, "ReasoningTextContent", p.(map[string]any))
		}
	case "function_call":
		conforms(t, "FunctionToolCall", item)
	default:
		t.Fatalf("output item of type %v", item["type"])
	}
}

// readResponsesStream parses a Responses event stream: "event: NAME" and "data: JSON"
// per event, NAME == the data's type, sequence numbers 0, 1, 2...; comments allowed.
func readResponsesStream(t testing.TB, data []byte) []map[string]any {
	t.Helper()
	var events []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
			if ev["type"] != name {
				t.Fatalf("event line %q but data type %v", name, ev["type"])
			}
			if n := ev["sequence_number"]; n != float64(len(events)) {
				t.Fatalf("sequence_number %v, want %d", n, len(events))
			}
			conforms(t, eventSchema(t, name), ev)
			events = append(events, ev)
			name = ""
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	return events
}

// checkEventOrder checks the order the spec's streaming guide gives: created,
// in_progress, then per output item added → (part added → deltas → done → part done) →
// item done, items in output_index order, and one terminal event last. It returns the
// terminal event's response.
func checkEventOrder(t testing.TB, events []map[string]any) map[string]any {
	t.Helper()
	if len(events) < 3 || events[0]["type"] != "response.created" || events[1]["type"] != "response.in_progress" {
		t.Fatalf("stream does not start with created, in_progress: %v", events[:min(2, len(events))])
	}
	open := -1
	nextIndex := 0
	text := map[int]string{}
	for i, ev := range events[2 : len(events)-1] {
		typ := ev["type"].(string)
		idx, hasIdx := ev["output_index"].(float64)
		switch typ {
		case "response.output_item.added":
			if open >= 0 || int(idx) != nextIndex {
				t.Fatalf("event %d: item %v added while %d is open (next %d)", i, idx, open, nextIndex)
			}
			open = int(idx)
			nextIndex++
			if ev["item"].(map[string]any)["status"] != "in_progress" {
				t.Fatalf("added item not in progress: %v", ev)
			}
		case "response.output_item.done":
			if int(idx) != open {
				t.Fatalf("item %v done while %d is open", idx, open)
			}
			item := ev["item"].(map[string]any)
			conformsItem(t, item)
			switch item["type"] {
			case "message":
				if got := item["content"].([]any)[0].(map[string]any)["text"]; got != text[open] {
					t.Fatalf("message text %q, deltas %q", got, text[open])
				}
			case "function_call":
				if item["arguments"] != text[open] && !(text[open] == "" && item["arguments"] == "{}") {
					t.Fatalf("arguments %q, deltas %q", item["arguments"], text[open])
				}
			}
			open = -1
		default:
			if !hasIdx || int(idx) != open {
				t.Fatalf("event %s for item %v while %d is open", typ, idx, open)
			}
			switch typ {
			case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_text.delta":
				text[open] += ev["delta"].(string)
			}
		}
	}
	if open >= 0 {
		t.Fatalf("item %d never done", open)
	}
	last := events[len(events)-1]
	switch last["type"] {
	case "response.completed", "response.incomplete", "response.failed":
	default:
		t.Fatalf("stream ends with %v", last["type"])
	}
	r := last["response"].(map[string]any)
	conformsResponse(t, r)
	if got := len(r["output"].([]any)); got != nextIndex {
		t.Fatalf("final response has %d items, the stream added %d", got, nextIndex)
	}
	return r
}

func (ts *testServer) responses(t testing.TB, body map[string]any) map[string]any {
	t.Helper()
	status, _, data := ts.post(t, "/v1/responses", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	var r map[string]any
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	conformsResponse(t, r)
	return r
}

func (ts *testServer) streamResponses(t testing.TB, body map[string]any) (map[string]any, []map[string]any) {
	t.Helper()
	status, hdr, data := ts.post(t, "/v1/responses", withField(body, "stream", true))
	if status != 200 || hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream status %d %q: %s", status, hdr.Get("Content-Type"), data)
	}
	events := readResponsesStream(t, data)
	return checkEventOrder(t, events), events
}

// withoutIDs drops the random ids and times, so two responses can be compared.
func withoutIDs(r map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r {
		switch k {
		case "id", "created_at", "completed_at":
			continue
		case "output":
			var items []any
			for _, it := range v.([]any) {
				m := map[string]any{}
				for ik, iv := range it.(map[string]any) {
					if ik != "id" && ik != "call_id" {
						m[ik] = iv
					}
				}
				items = append(items, m)
			}
			out[k] = items
		default:
			out[k] = v
		}
	}
	return out
}

func usageOf(r map[string]any) (in, cached, out, reasoning, total int) {
	u := r["usage"].(map[string]any)
	return int(u["input_tokens"].(float64)), int(u["input_tokens_details"].(map[string]any)["cached_tokens"].(float64)),
		int(u["output_tokens"].(float64)), int(u["output_tokens_details"].(map[string]any)["reasoning_tokens"].(float64)),
		int(u["total_tokens"].(float64))
}

// The Responses API runs the chat request it means: the same prompt tokens, the same
// output, the same usage; streamed == not streamed; every event and object has the
// spec's required fields and types, in the spec's order.
func TestResponsesMatchChatStreamedAndNot(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.CacheBytes = -1 })
	for _, effort := range []string{"none", "high"} {
		body := map[string]any{"model": testModel, "instructions": "Be brief.", "input": "Tell me a story",
			"max_output_tokens": 12, "temperature": 0, "reasoning": map[string]any{"effort": effort}}
		r := ts.responses(t, body)
		tr := ts.lastTrace(t)
		c := ts.chat(t, map[string]any{"model": testModel, "max_tokens": 12, "temperature": 0, "reasoning_effort": effort,
			"messages": []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story"}}})
		ctr := ts.lastTrace(t)
		if !reflect.DeepEqual(tr.Prompt, ctr.Prompt) || !reflect.DeepEqual(tr.Result.Tokens, ctr.Result.Tokens) {
			t.Fatalf("effort %s: responses and chat ran different prompts or outputs", effort)
		}
		in, cached, out, reasoning, total := usageOf(r)
		if in != len(tr.Prompt) || out != len(tr.Result.Tokens) || total != in+out || cached != 0 ||
			in != c.Usage.PromptTokens || out != c.Usage.CompletionTokens || reasoning != c.Usage.CompletionTokensDetails.ReasoningTokens {
			t.Fatalf("effort %s: usage %v, chat usage %+v, trace %d+%d", effort, r["usage"], c.Usage, len(tr.Prompt), len(tr.Result.Tokens))
		}
		if (effort == "none") != (reasoning == 0) {
			t.Fatalf("effort %s: %d reasoning tokens", effort, reasoning)
		}
		var text, thought string
		for _, it := range r["output"].([]any) {
			item := it.(map[string]any)
			switch item["type"] {
			case "message":
				text += item["content"].([]any)[0].(map[string]any)["text"].(string)
			case "reasoning":
				thought += item["content"].([]any)[0].(map[string]any)["text"].(string)
				if s := item["summary"].([]any)[0].(map[string]any)["text"]; s != thought {
					t.Fatalf("summary %q != reasoning %q", s, thought)
				}
			}
		}
		if text != c.content() || thought != c.reasoning() {
			t.Fatalf("effort %s: text %q reasoning %q; chat %q %q", effort, text, thought, c.content(), c.reasoning())
		}
		wantStatus := "completed"
		if c.Choices[0].FinishReason == "length" {
			wantStatus = "incomplete"
			if r["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
				t.Fatalf("incomplete_details %v", r["incomplete_details"])
			}
		}
		if r["status"] != wantStatus || r["instructions"] != "Be brief." || r["object"] != "response" || !strings.HasPrefix(r["id"].(string), "resp_") {
			t.Fatalf("effort %s: %v", effort, r)
		}
		final, _ := ts.streamResponses(t, body)
		if !reflect.DeepEqual(withoutIDs(final), withoutIDs(r)) {
			a, _ := json.Marshal(withoutIDs(final))
			b, _ := json.Marshal(withoutIDs(r))
			t.Fatalf("effort %s: streamed response differs:\n%s\n%s", effort, a, b)
		}
	}
}

// A two-call Qwen tool-call output through the real tokenizer, parser and the Responses
// builder: a message, then two function_call items with call ids, names and arguments;
// the events stream them in order; the items, sent back as input with their outputs,
// render the same prompt as the chat messages they stand for.
func TestResponsesFunctionCallRoundTrip(t *testing.T) {
	tok := tinyTokenizer(t)
	output := "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>"
	p := newPipeline(tok.NewStreamDecoder(), nil, chatParser{chat.NewParser(chat.ParserOptions{ParseTools: true})})
	b := newResponsesBuilder()
	var events []map[string]any
	b.emit = func(ev map[string]any) error {
		ev["sequence_number"] = len(events) + 2
		raw := marshalJSON(ev)
		var m map[string]any
		json.Unmarshal(raw, &m)
		events = append(events, m)
		return nil
	}
	for _, id := range tok.Encode(output) {
		ds, _ := p.push(id)
		b.push(ds)
	}
	b.push(p.finish())
	b.finish("completed")
	var items []any
	json.Unmarshal(marshalJSON(b.items), &items)
	head := []map[string]any{{"type": "response.created"}, {"type": "response.in_progress"}}
	tail := map[string]any{"type": "response.completed", "response": map[string]any{"output": items, "id": "resp_x", "object": "response",
		"created_at": 1.0, "error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{}, "model": testModel,
		"parallel_tool_calls": true, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": []any{}}}
	for _, ev := range events {
		conforms(t, eventSchema(t, ev["type"].(string)), ev)
	}
	checkEventOrder(t, append(append(head, events...), tail))
	if len(items) != 3 {
		t.Fatalf("%d items: %v", len(items), items)
	}
	msg, c1, c2 := items[0].(map[string]any), items[1].(map[string]any), items[2].(map[string]any)
	if msg["type"] != "message" || msg["content"].([]any)[0].(map[string]any)["text"] != "Let me check." {
		t.Fatalf("message %v", msg)
	}
	if c1["name"] != "get_weather" || c1["arguments"] != `{"city": "Paris"}` || c2["name"] != "get_time" || c2["arguments"] != `{"zone": "CET"}` ||
		c1["call_id"] == c2["call_id"] || !strings.HasPrefix(c1["call_id"].(string), "call_") || !strings.HasPrefix(c1["id"].(string), "fc_") {
		t.Fatalf("calls %v %v", c1, c2)
	}

	// The round trip: those items and the calls' outputs as the next request's input.
	ts := startServer(t, nil)
	tools := []map[string]any{
		{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}},
		{"type": "function", "name": "get_time", "parameters": map[string]any{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}}},
		{"type": "web_search"},
	}
	input := []any{map[string]any{"role": "user", "content": "Weather and time?"}}
	input = append(input, items...)
	input = append(input, map[string]any{"type": "function_call_output", "call_id": c1["call_id"], "output": "sunny"},
		map[string]any{"type": "function_call_output", "call_id": c2["call_id"], "output": []any{map[string]any{"type": "input_text", "text": "12:00"}}})
	r := ts.responses(t, map[string]any{"model": testModel, "input": input, "tools": tools, "max_output_tokens": 3, "temperature": 0})
	got := ts.lastTrace(t).Prompt
	chatTools := []map[string]any{{"type": "function", "function": tools[0]}, {"type": "function", "function": tools[1]}}
	for _, ct := range chatTools {
		delete(ct["function"].(map[string]any), "type")
	}
	ts.chat(t, map[string]any{"model": testModel, "max_tokens": 3, "temperature": 0, "tools": chatTools, "messages": []any{
		map[string]any{"role": "user", "content": "Weather and time?"},
		map[string]any{"role": "assistant", "content": "Let me check.", "tool_calls": []any{
			map[string]any{"id": c1["call_id"], "type": "function", "function": map[string]any{"name": "get_weather", "arguments": c1["arguments"]}},
			map[string]any{"id": c2["call_id"], "type": "function", "function": map[string]any{"name": "get_time", "arguments": c2["arguments"]}}}},
		map[string]any{"role": "tool", "tool_call_id": c1["call_id"], "content": "sunny"},
		map[string]any{"role": "tool", "tool_call_id": c2["call_id"], "content": "12:00"}}})
	if want := ts.lastTrace(t).Prompt; !reflect.DeepEqual(got, want) {
		t.Fatalf("the round trip rendered another prompt than the chat messages:\n%q\n%q", ts.tok.Decode(got), ts.tok.Decode(want))
	}
	if tl := r["tools"].([]any); len(tl) != 2 {
		t.Fatalf("the hosted tool is echoed: %v", tl)
	}

	// previous_response_id: the stored conversation, then the new input.
	next := ts.responses(t, map[string]any{"model": testModel, "input": "And tomorrow?", "previous_response_id": r["id"], "max_output_tokens": 2, "temperature": 0})
	if next["previous_response_id"] != r["id"] {
		t.Fatalf("previous_response_id %v", next["previous_response_id"])
	}
	prompt := ts.tok.Decode(ts.lastTrace(t).Prompt)
	if !strings.Contains(prompt, "Weather and time?") || !strings.Contains(prompt, "12:00") || !strings.HasSuffix(prompt, "And tomorrow?<|im_end|>\n<|im_start|>assistant\n<think>\n") {
		t.Fatalf("continued prompt %q", prompt)
	}
}

// Errors before the first byte are OpenAI error objects with the Responses param, also
// for stream: true; a hosted tool is dropped, not refused.
func TestResponsesErrors(t *testing.T) {
	var logged syncBuffer
	ts := startServer(t, func(c *Config) { c.Context = 256; c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logged}) })
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"model": testModel, "input": "hi", "max_output_tokens": 2, "stream": true}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for _, c := range []struct {
		body   map[string]any
		status int
		param  string
	}{
		{base(map[string]any{"model": "nope"}), 404, ""},
		{base(map[string]any{"input": nil}), 400, "input"},
		{base(map[string]any{"input": []any{map[string]any{"type": "message", "role": "wizard", "content": "x"}}}), 400, "input[0].role"},
		{base(map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "x"}}}}}), 400, "input[0].content[0].type"},
		{base(map[string]any{"input": []any{map[string]any{"type": "function_call", "name": "f", "arguments": "{}"}}}), 400, "input[0].call_id"},
		{base(map[string]any{"input": []any{map[string]any{"type": "function_call", "call_id": "c", "name": "f", "arguments": "not json"}}}), 400, "input[0].arguments"},
		{base(map[string]any{"max_output_tokens": 0}), 400, "max_output_tokens"},
		{base(map[string]any{"temperature": 3}), 400, "temperature"},
		{base(map[string]any{"reasoning": map[string]any{"effort": "enormous"}}), 400, "reasoning.effort"},
		{base(map[string]any{"tools": []any{map[string]any{"type": "function"}}}), 400, "tools[0].name"},
		{base(map[string]any{"tools": []any{map[string]any{"type": "teleport"}}}), 400, "tools[0].type"},
		{base(map[string]any{"previous_response_id": "resp_never"}), 400, "previous_response_id"},
		{base(map[string]any{"input": strings.Repeat("word ", 400)}), 400, "input"},
		{base(map[string]any{"background": true}), 400, "background"},
	} {
		status, hdr, data := ts.post(t, "/v1/responses", c.body)
		wantError(t, status, hdr, data, c.status, c.param)
	}
	status, _, data := ts.post(t, "/responses", map[string]any{"model": testModel, "input": "hi", "max_output_tokens": 2,
		"tools": []any{map[string]any{"type": "web_search"}, map[string]any{"type": "namespace", "name": "n", "tools": []any{}}},
		"store": false, "include": []string{"reasoning.encrypted_content"}, "prompt_cache_key": "k", "client_metadata": map[string]any{"a": "b"},
		"reasoning": map[string]any{"summary": "auto"}, "text": map[string]any{"verbosity": "low"}, "parallel_tool_calls": false})
	if status != 200 {
		t.Fatalf("accepted-and-ignored fields: %d %s", status, data)
	}
	if !strings.Contains(logged.String(), "hosted tools dropped") || !strings.Contains(logged.String(), `types="web_search,namespace"`) {
		t.Fatalf("no log line for the dropped tools: %s", logged.String())
	}
	var r map[string]any
	json.Unmarshal(data, &r)
	// store: false keeps nothing to continue from.
	status, hdr, data := ts.post(t, "/v1/responses", map[string]any{"model": testModel, "input": "x", "previous_response_id": r["id"]})
	wantError(t, status, hdr, data, 400, "previous_response_id")
}

// A client that leaves a Responses stream cancels its generation within one decode step.
func TestResponsesCancelOnDisconnect(t *testing.T) {
	ts := startServer(t, nil)
	before := ts.traceCount()
	raw, _ := json.Marshal(map[string]any{"model": testModel, "input": "Tell me everything", "max_output_tokens": 300, "ignore_eos": true, "stream": true})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/responses", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for deltas := 0; deltas < 5 && sc.Scan(); {
		if strings.Contains(sc.Text(), `text.delta"`) {
			deltas++
		}
	}
	cancel()
	resp.Body.Close()
	waitTraces(t, ts, before+1)
	g := ts.lastTrace(t)
	if !errors.Is(g.Err, context.Canceled) || g.Result.StepsAfterCancel < 0 || g.Result.StepsAfterCancel > 1 || len(g.Result.Tokens) >= 300 {
		t.Fatalf("after disconnect: err %v, %d steps after cancel, %d tokens", g.Err, g.Result.StepsAfterCancel, len(g.Result.Tokens))
	}
	waitIdle(t, ts)
	ts.responses(t, map[string]any{"model": testModel, "input": "next", "max_output_tokens": 2})
}

// After the 200 a failure is response.failed, the stream's last event, with an error.
func TestResponsesFailedAfterFirstByte(t *testing.T) {
	model, err := exec.Open(tiny.dir, exec.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(testConfig())
	if err := s.Load(func() (*exec.Model, error) { return model, nil }); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ts := &testServer{Server: s, URL: hs.URL, client: hs.Client()}
	done := make(chan []byte)
	go func() {
		resp, err := ts.client.Post(ts.URL+"/v1/responses", "application/json", strings.NewReader(
			`{"model":"tiny","input":"story","max_output_tokens":1000,"ignore_eos":true,"stream":true}`))
		if err != nil {
			done <- nil
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- data
	}()
	waitRunning(t, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	events := readResponsesStream(t, <-done)
	last := events[len(events)-1]
	if last["type"] != "response.failed" {
		t.Fatalf("last event %v", last["type"])
	}
	r := checkEventOrder(t, events)
	e, _ := r["error"].(map[string]any)
	if r["status"] != "failed" || e == nil || e["code"] != "shutting_down" || e["message"] == "" {
		t.Fatalf("failed response %v", r)
	}
}

// item_reference (the AI SDK's way to send its earlier steps when store is on) resolves to
// the output items of a stored response: the same prompt as the items sent whole.
func TestResponsesItemReference(t *testing.T) {
	ts := startServer(t, nil)
	first := ts.responses(t, map[string]any{"model": testModel, "input": "Question?", "max_output_tokens": 6, "temperature": 0})
	var refs, whole []any
	refs = append(refs, map[string]any{"role": "user", "content": "Question?"})
	whole = append(whole, map[string]any{"role": "user", "content": "Question?"})
	for _, it := range first["output"].([]any) {
		item := it.(map[string]any)
		refs = append(refs, map[string]any{"type": "item_reference", "id": item["id"]})
		whole = append(whole, item)
	}
	refs = append(refs, map[string]any{"role": "user", "content": "And then?"})
	whole = append(whole, map[string]any{"role": "user", "content": "And then?"})
	ts.responses(t, map[string]any{"model": testModel, "input": refs, "max_output_tokens": 2})
	byRef := ts.lastTrace(t).Prompt
	ts.responses(t, map[string]any{"model": testModel, "input": whole, "max_output_tokens": 2})
	if want := ts.lastTrace(t).Prompt; !reflect.DeepEqual(byRef, want) {
		t.Fatalf("references rendered %q, the items %q", ts.tok.Decode(byRef), ts.tok.Decode(want))
	}
	status, hdr, data := ts.post(t, "/v1/responses", map[string]any{"model": testModel,
		"input": []any{map[string]any{"role": "user", "content": "x"}, map[string]any{"type": "item_reference", "id": "msg_unknown"}}})
	wantError(t, status, hdr, data, 400, "input[1].id")
	unstored := ts.responses(t, map[string]any{"model": testModel, "input": "x", "max_output_tokens": 2, "store": false})
	id := unstored["output"].([]any)[0].(map[string]any)["id"]
	status, hdr, data = ts.post(t, "/v1/responses", map[string]any{"model": testModel,
		"input": []any{map[string]any{"role": "user", "content": "x"}, map[string]any{"type": "item_reference", "id": id}}})
	wantError(t, status, hdr, data, 400, "input[1].id")
}

// The store keeps the last responseStoreEntries responses and their items.
func TestResponseStoreBound(t *testing.T) {
	var st responseStore
	for i := 0; i <= responseStoreEntries; i++ {
		st.put(fmt.Sprintf("resp_%d", i), []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)},
			map[string]inputItem{fmt.Sprintf("msg_%d", i): {kind: "message", role: "assistant", text: "y"}})
	}
	if _, ok := st.get("resp_0"); ok {
		t.Fatal("the oldest response outlived the bound")
	}
	if _, ok := st.item("msg_0"); ok {
		t.Fatal("the oldest response's items outlived it")
	}
	st.get("resp_1") // used: now the newest
	st.put("resp_new", nil, nil)
	if _, ok := st.get("resp_1"); !ok {
		t.Fatal("a recently used response was evicted")
	}
	if _, ok := st.get("resp_2"); ok {
		t.Fatal("the least recently used response was kept")
	}
	if it, ok := st.item("msg_3"); !ok || it.text != "y" {
		t.Fatalf("item %+v %v", it, ok)
	}
}

// syncBuffer is a log sink a test can read while handlers write to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Responses requests wait in the chat requests' queue: with one running and the queue
// full, the next gets 503 server_busy with Retry-After, and the waiting one is served.
func TestResponsesShareTheQueue(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Queue = 1 })
	long := map[string]any{"model": testModel, "input": "story", "max_output_tokens": 300, "ignore_eos": true}
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _, _ = ts.post(t, "/v1/responses", long)
		}()
		if i == 0 {
			waitRunning(t, ts)
		}
	}
	for d, _ := ts.sched.depth(); d < 1; d, _ = ts.sched.depth() {
		time.Sleep(time.Millisecond)
	}
	// A chat request takes the same queue.
	status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("x", nil))
	e := wantError(t, status, hdr, data, 503, "")
	if e.Error.Code == nil || *e.Error.Code != "server_busy" || hdr.Get("Retry-After") == "" {
		t.Fatalf("overflow: %s", data)
	}
	status, hdr, data = ts.post(t, "/v1/responses", map[string]any{"model": testModel, "input": "x", "stream": true})
	wantError(t, status, hdr, data, 503, "")
	wg.Wait()
	if statuses[0] != 200 || statuses[1] != 200 {
		t.Fatalf("running and queued requests: %v", statuses)
	}
}
