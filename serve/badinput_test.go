package serve

import (
	"fmt"
	"strings"
	"testing"
)

// B1-B9: malformed and invalid requests get 400 (or the named 4xx) with an OpenAI error
// object whose param names the field, and the server keeps serving.
func TestBadInput(t *testing.T) {
	ts := startServer(t, nil)
	msg := `[{"role":"user","content":"hi"}]`
	cases := []struct {
		name   string
		body   string
		status int
		param  string
	}{
		// B1: not JSON.
		{"truncated", `{"messages":`, 400, ""},
		{"not json", `not json`, 400, ""},
		{"empty body", ``, 400, ""},
		// B2: JSON that is not an object.
		{"array", `[]`, 400, ""},
		{"string", `"str"`, 400, ""},
		{"number", `42`, 400, ""},
		{"null", `null`, 400, ""},
		// B3: messages.
		{"messages missing", `{"model":"tiny"}`, 400, "messages"},
		{"messages null", `{"model":"tiny","messages":null}`, 400, "messages"},
		{"messages string", `{"model":"tiny","messages":"hi"}`, 400, "messages"},
		{"messages empty", `{"model":"tiny","messages":[]}`, 400, "messages"},
		{"message number", `{"model":"tiny","messages":[123]}`, 400, "messages[0]"},
		{"message empty object", `{"model":"tiny","messages":[{}]}`, 400, "messages[0].role"},
		{"role number", `{"model":"tiny","messages":[{"role":123}]}`, 400, "messages[0]"},
		{"content number", `{"model":"tiny","messages":[{"role":"user","content":123}]}`, 400, "messages[0].content"},
		{"unknown role", `{"model":"tiny","messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role"},
		{"user content null", `{"model":"tiny","messages":[{"role":"user","content":null}]}`, 400, "messages[0].content"},
		{"system not first", `{"model":"tiny","messages":[{"role":"user","content":"a"},{"role":"system","content":"b"}]}`, 400, "messages"},
		// B4: values out of range.
		{"temperature -1", `{"model":"tiny","messages":` + msg + `,"temperature":-1}`, 400, "temperature"},
		{"temperature 3", `{"model":"tiny","messages":` + msg + `,"temperature":3}`, 400, "temperature"},
		{"temperature string", `{"model":"tiny","messages":` + msg + `,"temperature":"hot"}`, 400, "temperature"},
		{"top_p 1.5", `{"model":"tiny","messages":` + msg + `,"top_p":1.5}`, 400, "top_p"},
		{"top_k 1.5", `{"model":"tiny","messages":` + msg + `,"top_k":1.5}`, 400, "top_k"},
		{"min_p 2", `{"model":"tiny","messages":` + msg + `,"min_p":2}`, 400, "min_p"},
		{"presence 5", `{"model":"tiny","messages":` + msg + `,"presence_penalty":5}`, 400, "presence_penalty"},
		{"frequency -5", `{"model":"tiny","messages":` + msg + `,"frequency_penalty":-5}`, 400, "frequency_penalty"},
		{"n 0", `{"model":"tiny","messages":` + msg + `,"n":0}`, 400, "n"},
		{"n 2", `{"model":"tiny","messages":` + msg + `,"n":2}`, 400, "n"},
		{"seed 2^63", `{"model":"tiny","messages":` + msg + `,"seed":9223372036854775808}`, 400, "seed"},
		{"seed float", `{"model":"tiny","messages":` + msg + `,"seed":1.5}`, 400, "seed"},
		{"stop 5", `{"model":"tiny","messages":` + msg + `,"stop":["a","b","c","d","e"]}`, 400, "stop"},
		{"stop empty string", `{"model":"tiny","messages":` + msg + `,"stop":""}`, 400, "stop[0]"},
		{"stop number", `{"model":"tiny","messages":` + msg + `,"stop":5}`, 400, "stop"},
		{"tool_choice sometimes", `{"model":"tiny","messages":` + msg + `,"tool_choice":"sometimes"}`, 400, "tool_choice"},
		{"tool_choice required", `{"model":"tiny","messages":` + msg + `,"tool_choice":"required"}`, 400, "tool_choice"},
		{"tool_choice named", `{"model":"tiny","messages":` + msg + `,"tool_choice":{"type":"function","function":{"name":"f"}}}`, 400, "tool_choice"},
		{"response_format sound", `{"model":"tiny","messages":` + msg + `,"response_format":{"type":"sound"}}`, 400, "response_format.type"},
		{"response_format unsupported keyword", `{"model":"tiny","messages":` + msg + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}}`, 400, "response_format.json_schema.schema"},
		{"response_format schema without name", `{"model":"tiny","messages":` + msg + `,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, 400, "response_format.json_schema.name"},
		{"stream_options without stream", `{"model":"tiny","messages":` + msg + `,"stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"logit_bias", `{"model":"tiny","messages":` + msg + `,"logit_bias":{"1":5}}`, 400, "logit_bias"},
		{"reasoning_effort bogus", `{"model":"tiny","messages":` + msg + `,"reasoning_effort":"max"}`, 400, "reasoning_effort"},
		{"template kwargs bogus", `{"model":"tiny","messages":` + msg + `,"chat_template_kwargs":{"enable_thinking":"yes"}}`, 400, "chat_template_kwargs.enable_thinking"},
		{"tool without name", `{"model":"tiny","messages":` + msg + `,"tools":[{"type":"function","function":{}}]}`, 400, "tools[0].function.name"},
		{"tool wrong type", `{"model":"tiny","messages":` + msg + `,"tools":[{"type":"code_interpreter"}]}`, 400, "tools[0].type"},
		{"tool call arguments not object", `{"model":"tiny","messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, 400, "messages[1].tool_calls[0].function.arguments"},
		// B8: invalid UTF-8 is refused (a lone surrogate escape is accepted as U+FFFD).
		{"invalid utf8", "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, ""},
		// B9: non-text content parts.
		{"image part", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]}`, 400, "messages[0].content[0].type"},
		{"audio part", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, 400, "messages[0].content[0].type"},
		{"file part", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"file","file":{}}]}]}`, 400, "messages[0].content[0].type"},
		// S5 in the model field: never a path, always 404.
		{"model path", `{"model":"../../etc/passwd","messages":` + msg + `}`, 404, ""},
		{"model abs path", `{"model":"/root/.ssh/id_rsa","messages":` + msg + `}`, 404, ""},
		{"model nul", `{"model":"tiny\u0000x","messages":` + msg + `}`, 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, hdr, data := ts.post(t, "/v1/chat/completions", c.body)
			e := wantError(t, status, hdr, data, c.status, c.param)
			if hdr.Get("X-Request-Id") == "" {
				t.Fatal("no X-Request-Id on the error")
			}
			// S6: no paths, stack traces or Go internals in messages.
			for _, bad := range []string{tiny.dir, "goroutine", ".go:", "runtime."} {
				if strings.Contains(e.Error.Message, bad) {
					t.Fatalf("error message leaks %q: %s", bad, e.Error.Message)
				}
			}
		})
	}
	// B5: unknown fields are ignored.
	r := ts.chat(t, chatBody("hi", map[string]any{"foo": 1, "store": true, "metadata": map[string]any{"a": "b"},
		"service_tier": "auto", "user": "u1", "parallel_tool_calls": false, "stream_options": nil}))
	if len(r.Choices) != 1 {
		t.Fatal("extra fields broke the request")
	}
	// stream_options:{} with stream:true is fine.
	ts.streamChat(t, chatBody("hi", map[string]any{"stream_options": map[string]any{}}))
	// A lone surrogate escape is valid JSON text: accepted, decoded as U+FFFD.
	status, _, data := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"\ud800"}]}`)
	if status != 200 {
		t.Fatalf("lone surrogate: %d %s", status, data)
	}
}

// B6: wrong content type, method and route.
func TestBadRoutesAndMethods(t *testing.T) {
	ts := startServer(t, nil)
	for _, ct := range []string{"application/x-www-form-urlencoded", "text/plain"} {
		status, hdr, data := ts.do(t, "POST", "/v1/chat/completions", "x=1", map[string]string{"Content-Type": ct})
		wantError(t, status, hdr, data, 415, "")
	}
	status, hdr, data := ts.do(t, "GET", "/v1/chat/completions", nil, nil)
	wantError(t, status, hdr, data, 405, "")
	if hdr.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", hdr.Get("Allow"))
	}
	status, hdr, data = ts.do(t, "POST", "/v1/nope", "{}", nil)
	wantError(t, status, hdr, data, 404, "")
	status, hdr, data = ts.do(t, "GET", "/v1/models/..%2F..%2Fetc%2Fpasswd", nil, nil)
	wantError(t, status, hdr, data, 404, "")
}

// B7: a prompt longer than the context is a 400 before any byte of a stream, with the
// wording agent frameworks match on.
func TestContextLengthExceeded(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Context = 64 })
	long := strings.Repeat("many words here ", 40)
	before := ts.traceCount()
	for _, stream := range []bool{false, true} {
		status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody(long, map[string]any{"stream": stream}))
		e := wantError(t, status, hdr, data, 400, "messages")
		if e.Error.Code == nil || *e.Error.Code != "context_length_exceeded" ||
			!strings.Contains(e.Error.Message, "maximum context length is 64 tokens") {
			t.Fatalf("stream=%v: %s", stream, data)
		}
	}
	status, hdr, data := ts.post(t, "/v1/completions", map[string]any{"model": testModel, "prompt": long, "stream": true})
	wantError(t, status, hdr, data, 400, "prompt")
	if ts.traceCount() != before {
		t.Fatal("an over-long prompt reached the engine")
	}
}

// S4: size limits: an oversized body is 413 before it is read whole; too many messages,
// stop strings or tools are 400; deep nesting is a 400, not a crash.
func TestSizeLimits(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxBody = 1 << 20 })
	big := `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	status, hdr, data := ts.post(t, "/v1/chat/completions", big)
	wantError(t, status, hdr, data, 413, "")

	var many strings.Builder
	many.WriteString(`{"model":"tiny","messages":[`)
	for i := 0; i < maxMessages+1; i++ {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"role":"user","content":"x"}`)
	}
	many.WriteString(`]}`)
	status, hdr, data = ts.post(t, "/v1/chat/completions", many.String())
	wantError(t, status, hdr, data, 400, "messages")

	status, hdr, data = ts.post(t, "/v1/chat/completions", chatBody("x", map[string]any{"stop": strings.Repeat("s", 2000)}))
	wantError(t, status, hdr, data, 400, "stop[0]")

	tools := make([]any, maxTools+1)
	for i := range tools {
		tools[i] = map[string]any{"type": "function", "function": map[string]any{"name": fmt.Sprintf("f%d", i)}}
	}
	status, hdr, data = ts.post(t, "/v1/chat/completions", chatBody("x", map[string]any{"tools": tools}))
	wantError(t, status, hdr, data, 400, "tools")

	deep := `{"model":"tiny","messages":` + msg1() + `,"metadata":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`
	status, hdr, data = ts.post(t, "/v1/chat/completions", deep)
	wantError(t, status, hdr, data, 400, "")
}

func msg1() string { return `[{"role":"user","content":"hi"}]` }
