package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"pistil/exec"
	"pistil/exec/constrain"
	"pistil/internal/schemagen"
)

// compileValidator compiles a JSON Schema with format assertion on.
func compileValidator(t testing.TB, doc []byte) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("schema.json", v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("validator rejects %s: %v", doc, err)
	}
	return s
}

func validateText(s *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return s.Validate(v)
}

// structuredMode is one of the four ways every structured case runs.
func structuredMode(i int) (stream, thinking bool) { return i%2 == 1, i/2%2 == 1 }

// The random-weight tiny model's unconstrained output is noise; under response_format
// json_schema every answer parses and validates, over 200 random schemas that use every
// supported keyword, streamed and not, thinking on and off.
func TestStructuredRandomSchemasValidate(t *testing.T) {
	ts := startServer(t, nil)
	rng := rand.New(rand.NewPCG(21, 22))
	reasoned := 0
	for i := 0; i < 200; i++ {
		doc := schemagen.Schema(rng)
		stream, thinking := structuredMode(i)
		budget := testBudget(minTokens(t, ts, doc), thinking)
		body := chatBody(fmt.Sprintf("answer %d as JSON", i), map[string]any{
			"max_tokens": budget, "temperature": 1, "seed": i,
			"response_format": map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "answer", "strict": true, "schema": json.RawMessage(doc)}},
			"chat_template_kwargs": map[string]any{"enable_thinking": thinking},
		})
		var content, reasoning, finish string
		if stream {
			r := ts.streamChat(t, body)
			content, reasoning, finish = r.content, r.reasoning, r.finish
		} else {
			r := ts.chat(t, body)
			content, reasoning, finish = r.content(), r.reasoning(), r.Choices[0].FinishReason
		}
		if finish != "stop" {
			t.Fatalf("schema %d (stream %v, thinking %v): finish %q, content %q\n%s", i, stream, thinking, finish, content, doc)
		}
		if err := validateText(compileValidator(t, doc), content); err != nil {
			t.Fatalf("schema %d (stream %v, thinking %v): %q does not validate: %v\n%s", i, stream, thinking, content, err, doc)
		}
		if thinking && reasoning != "" {
			reasoned++
		}
	}
	if reasoned == 0 {
		t.Fatal("no request with thinking on reasoned before its answer: the constraint did not start after </think>")
	}
}

// testBudget is max_tokens for a case whose shortest answer takes least tokens: some room
// beyond it, and with thinking on, room for some reasoning before the reserve (twice the
// shortest answer) forces </think>. Short generations keep the tests fast.
func testBudget(least int, thinking bool) int {
	if thinking {
		return 2*least + 24
	}
	return least + 16
}

// minTokens is the fewest tokens that complete a schema's grammar (end token included).
func minTokens(t *testing.T, ts *testServer, doc []byte) int {
	t.Helper()
	g, err := constrain.CompileSchema(doc)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return grammarMinTokens(t, ts, g)
}

func grammarMinTokens(t *testing.T, ts *testServer, g *constrain.Grammar) int {
	t.Helper()
	v, err := ts.constrainVocab()
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.NewMatcher(v, false)
	if err != nil {
		t.Fatal(err)
	}
	return m.MinTokens()
}

func TestStructuredJSONObject(t *testing.T) {
	ts := startServer(t, nil)
	for i := 0; i < 8; i++ {
		stream, thinking := structuredMode(i)
		body := chatBody("an object please", map[string]any{"max_tokens": 120, "temperature": 1, "seed": i,
			"response_format":      map[string]any{"type": "json_object"},
			"chat_template_kwargs": map[string]any{"enable_thinking": thinking}})
		var content string
		if stream {
			content = ts.streamChat(t, body).content
		} else {
			r := ts.chat(t, body)
			content = r.content()
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(content), &obj); err != nil {
			t.Fatalf("case %d: %q is not a JSON object: %v", i, content, err)
		}
	}
	// the legacy completions endpoint takes response_format too
	status, _, data := ts.post(t, "/v1/completions", map[string]any{"model": testModel, "prompt": "x", "max_tokens": 120,
		"temperature": 1, "seed": 1, "response_format": map[string]any{"type": "json_object"}})
	var r textResponse
	if status != 200 || json.Unmarshal(data, &r) != nil {
		t.Fatalf("%d %s", status, data)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(r.Choices[0].Text), &obj); err != nil {
		t.Fatalf("completion %q is not a JSON object: %v", r.Choices[0].Text, err)
	}
}

// With tool_choice "required" (or a named function) every response is a tool call of an
// offered tool whose arguments validate against its parameters; parallel_tool_calls false
// gives exactly one call.
func TestStructuredToolChoiceForced(t *testing.T) {
	ts := startServer(t, nil)
	rng := rand.New(rand.NewPCG(31, 32))
	var tools []map[string]any
	var allTools []constrain.Tool
	params := map[string][]byte{}
	for i := 0; i < 16; i++ {
		if i%4 == 0 {
			// A new tool set every four cases: the four modes of one set share the prompt
			// (the long tool instructions), so three of them restore it from the cache.
			tools, allTools = nil, nil
			for k := 0; k < 1+rng.IntN(2); k++ {
				name := fmt.Sprintf("tool_%d_%d", i, k)
				doc := schemagen.Parameters(rng)
				params[name] = doc
				allTools = append(allTools, constrain.Tool{Name: name, Parameters: doc})
				tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
					"name": name, "parameters": json.RawMessage(doc)}})
			}
		}
		ctools, n := allTools, len(allTools)
		stream, thinking := structuredMode(i)
		var choice any = "required"
		named := ""
		switch i % 3 {
		case 2:
			k := rng.IntN(n)
			named = ctools[k].Name
			ctools = ctools[k : k+1]
			choice = map[string]any{"type": "function", "function": map[string]any{"name": named}}
		case 1:
			if n > 1 { // allowed_tools, required: only the first tool may be called
				named = ctools[0].Name
				ctools = ctools[:1]
				choice = map[string]any{"type": "allowed_tools", "allowed_tools": map[string]any{"mode": "required",
					"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": named}}}}}
			}
		}
		g, err := constrain.CompileToolCall(ctools, false)
		if err != nil {
			t.Fatal(err)
		}
		budget := testBudget(grammarMinTokens(t, ts, g), thinking)
		parallel := i%5 != 0
		body := chatBody("call a tool", map[string]any{"max_tokens": budget, "temperature": 1, "seed": i,
			"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel,
			"chat_template_kwargs": map[string]any{"enable_thinking": thinking}})
		type call struct{ name, args string }
		var calls []call
		var finish, content string
		if stream {
			r := ts.streamChat(t, body)
			for k := 0; k < len(r.calls); k++ {
				c := r.calls[k]
				if c == nil {
					t.Fatalf("case %d: tool call indices are not dense: %v", i, r.calls)
				}
				calls = append(calls, call{c.name, c.args})
			}
			finish, content = r.finish, r.content
		} else {
			r := ts.chat(t, body)
			for _, c := range r.Choices[0].Message.ToolCalls {
				calls = append(calls, call{c.Function.Name, c.Function.Arguments})
			}
			finish, content = r.Choices[0].FinishReason, r.content()
		}
		if finish != "tool_calls" || len(calls) == 0 {
			t.Fatalf("case %d (stream %v, thinking %v): finish %q, %d calls, content %q", i, stream, thinking, finish, len(calls), content)
		}
		if !parallel && len(calls) != 1 {
			t.Fatalf("case %d: parallel_tool_calls false gave %d calls", i, len(calls))
		}
		for _, c := range calls {
			doc, ok := params[c.name]
			if !ok || named != "" && c.name != named {
				t.Fatalf("case %d: call of %q (named %q)", i, c.name, named)
			}
			if err := validateText(compileValidator(t, doc), c.args); err != nil {
				t.Fatalf("case %d: %s(%s) does not validate: %v\n%s", i, c.name, c.args, err, doc)
			}
		}
	}
}

func TestStructuredBadRequests(t *testing.T) {
	ts := startServer(t, nil)
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"a": map[string]any{"type": "string", "pattern": "x"}}}}}
	format := func(schema string) map[string]any {
		return map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "s", "schema": json.RawMessage(schema)}}
	}
	for _, c := range []struct {
		extra   map[string]any
		param   string
		mention string
	}{
		{map[string]any{"response_format": format(`{"type":"string","pattern":"^a"}`)}, "response_format.json_schema.schema", "pattern"},
		{map[string]any{"response_format": format(`{"type":"object","properties":{"x":{"type":"integer","multipleOf":2}}}`)}, "response_format.json_schema.schema", "multipleOf"},
		{map[string]any{"response_format": format(`{"allOf":[{}]}`)}, "response_format.json_schema.schema", "allOf"},
		{map[string]any{"response_format": format(`{"type":"string","format":"hostname"}`)}, "response_format.json_schema.schema", "hostname"},
		{map[string]any{"response_format": format(`{"type":"strng"}`)}, "response_format.json_schema.schema", "strng"},
		{map[string]any{"tools": []any{tool}, "tool_choice": "required"}, "tools", "pattern"},
		{map[string]any{"tool_choice": "required"}, "tool_choice", "tools"},
		{map[string]any{"tools": []any{tool}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}, "tool_choice.function.name", "g"},
		{map[string]any{"response_format": map[string]any{"type": "json_object"}, "ignore_eos": true}, "ignore_eos", "ignore_eos"},
		{map[string]any{"tools": []any{tool}, "tool_choice": map[string]any{"type": "allowed_tools", "allowed_tools": map[string]any{"mode": "required",
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}}}}, "tool_choice.allowed_tools.tools", "allowed_tools"},
	} {
		status, hdr, data := ts.post(t, "/v1/chat/completions", chatBody("x", c.extra))
		e := wantError(t, status, hdr, data, 400, c.param)
		if !strings.Contains(e.Error.Message, c.mention) {
			t.Errorf("%v: message %q does not name %q", c.extra, e.Error.Message, c.mention)
		}
	}
}

// logprobs are the log-softmax of the CPU backend's logits at every generated position
// (reference: one Forward pass over prompt and output with every position's logits), and
// greedy decoding finds the chosen token first in top_logprobs. Chat and completions,
// streamed and not, with and without a schema (logprobs come before the mask).
func TestLogprobsMatchReferenceLogits(t *testing.T) {
	ts := startServer(t, nil)
	ref, err := exec.Open(tiny.dir, exec.Options{Backend: "cpu", AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	type entry struct {
		logprob float64
		top     []float64
		topIDs  []string
		token   string
	}
	var worst, worstStep float64
	defer func() {
		t.Logf("largest |logprob - reference|: %.3g against one Forward pass, %.3g against the same prefill cuts and decode steps", worst, worstStep)
	}()
	for i := 0; i < 6; i++ {
		chat, stream := i%2 == 0, i/2%2 == 1
		withSchema := i >= 4
		var entries []entry
		if chat {
			extra := map[string]any{"max_tokens": 12, "logprobs": true, "top_logprobs": 5, "stream": stream,
				"chat_template_kwargs": map[string]any{"enable_thinking": false}}
			if withSchema {
				extra["response_format"] = map[string]any{"type": "json_object"}
			}
			status, _, data := ts.post(t, "/v1/chat/completions", chatBody("logprobs please", extra))
			if status != 200 {
				t.Fatalf("%d %s", status, data)
			}
			for _, obj := range choiceObjects(t, data, stream) {
				var lp struct {
					Content []struct {
						Token       string  `json:"token"`
						Logprob     float64 `json:"logprob"`
						TopLogprobs []struct {
							Token   string  `json:"token"`
							Logprob float64 `json:"logprob"`
						} `json:"top_logprobs"`
					} `json:"content"`
				}
				if string(obj) == "null" {
					continue
				}
				if err := json.Unmarshal(obj, &lp); err != nil {
					t.Fatalf("logprobs %s: %v", obj, err)
				}
				for _, c := range lp.Content {
					e := entry{logprob: c.Logprob, token: c.Token}
					for _, tl := range c.TopLogprobs {
						e.top = append(e.top, tl.Logprob)
						e.topIDs = append(e.topIDs, tl.Token)
					}
					entries = append(entries, e)
				}
			}
		} else {
			status, _, data := ts.post(t, "/v1/completions", map[string]any{"model": testModel, "prompt": "Hello there",
				"max_tokens": 12, "temperature": 0, "logprobs": 5, "stream": stream})
			if status != 200 {
				t.Fatalf("%d %s", status, data)
			}
			for _, obj := range choiceObjects(t, data, stream) {
				if string(obj) == "null" {
					continue
				}
				var lp struct {
					Tokens        []string             `json:"tokens"`
					TokenLogprobs []float64            `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				}
				if err := json.Unmarshal(obj, &lp); err != nil {
					t.Fatalf("logprobs %s: %v", obj, err)
				}
				for k := range lp.Tokens {
					e := entry{logprob: lp.TokenLogprobs[k], token: lp.Tokens[k]}
					for tok, v := range lp.TopLogprobs[k] {
						e.top = append(e.top, v)
						e.topIDs = append(e.topIDs, tok)
					}
					entries = append(entries, e)
				}
			}
		}
		tr := ts.lastTrace(t)
		gen := tr.Result.Tokens
		if n := len(gen); n > 0 && ts.stopTokens[gen[n-1]] {
			gen = gen[:n-1] // the end-of-turn token is not output and has no entry
		}
		if len(entries) != len(gen) || len(gen) == 0 {
			t.Fatalf("case %d: %d logprob entries for %d generated tokens", i, len(entries), len(gen))
		}
		sess, err := ref.NewSession(len(tr.Prompt) + len(gen))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := sess.Forward(context.Background(), append(append([]int32(nil), tr.Prompt...), gen...))
		if err != nil {
			t.Fatal(err)
		}
		vocab := len(rows) / (len(tr.Prompt) + len(gen))
		// The same logits step by step: prefill cut where the server cuts, then decode.
		replay, err := ref.NewSession(len(tr.Prompt) + len(gen))
		if err != nil {
			t.Fatal(err)
		}
		err = replay.Prefill(context.Background(), tr.Prompt, exec.PrefillOptions{Cuts: ts.messageSplits(tr.Prompt),
			SnapshotEvery: testConfig().SnapshotEvery, OnSnapshot: func(*exec.Snapshot) {}})
		if err != nil {
			t.Fatal(err)
		}
		for k, id := range gen {
			row := rows[(len(tr.Prompt)-1+k)*vocab : (len(tr.Prompt)+k)*vocab]
			want := logSoftmax(row, int(id))
			d := math.Abs(entries[k].logprob - want)
			worst = math.Max(worst, d)
			if d > 1e-4 {
				t.Fatalf("case %d position %d: logprob %v, reference %v (diff %g)", i, k, entries[k].logprob, want, d)
			}
			stepWant := logSoftmax(replay.Logits(), int(id))
			sd := math.Abs(entries[k].logprob - stepWant)
			worstStep = math.Max(worstStep, sd)
			if sd > 1e-6*math.Max(1, math.Abs(stepWant)) {
				t.Fatalf("case %d position %d: logprob %v, decode-path reference %v (diff %g)", i, k, entries[k].logprob, stepWant, sd)
			}
			if err := replay.Decode(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if !withSchema {
				// greedy: the chosen token is the most likely one, so it heads top_logprobs
				best := math.Inf(-1)
				for _, v := range entries[k].top {
					best = math.Max(best, v)
				}
				// (the legacy form maps token text to logprob: tokens with the same text merge)
				if n := len(entries[k].top); n > 5 || n < 1 || chat && n != 5 || entries[k].logprob != best {
					t.Fatalf("case %d position %d: chosen logprob %v not the best of top_logprobs %v", i, k, entries[k].logprob, entries[k].top)
				}
			}
		}
	}
}

func logSoftmax(row []float32, id int) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, float64(v))
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v) - m)
	}
	return float64(row[id]) - m - math.Log(sum)
}

// choiceObjects returns the logprobs object of every choice in a response or a stream.
func choiceObjects(t *testing.T, data []byte, stream bool) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	add := func(raw []byte) {
		var r struct {
			Choices []struct {
				Logprobs json.RawMessage `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		for _, c := range r.Choices {
			out = append(out, c.Logprobs)
		}
	}
	if !stream {
		add(data)
		return out
	}
	for _, e := range readSSE(t, bytes.NewReader(data)) {
		if !e.comment && e.data != "[DONE]" {
			add([]byte(e.data))
		}
	}
	return out
}
