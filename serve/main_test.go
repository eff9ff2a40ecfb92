package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	_ "pistil/cpu" // the tests run the real CPU backend
	"pistil/exec"
)

// The tests run the real engine on a tiny random model written once per package run.
var tiny struct {
	dir   string
	model *exec.Model
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pistil-serve-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := writeTinyModel(dir); err != nil {
			fmt.Fprintln(os.Stderr, "write the tiny model:", err)
			return 1
		}
		model, err := exec.Open(dir, exec.Options{Backend: "cpu"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "open the tiny model:", err)
			return 1
		}
		defer model.Close()
		tiny.dir, tiny.model = dir, model
		return m.Run()
	}()
	os.Exit(code)
}

const testModel = "tiny"

// testServer is a ready Server behind a real HTTP listener on 127.0.0.1.
type testServer struct {
	*Server
	URL    string
	client *http.Client

	mu     sync.Mutex
	traces []genTrace
}

func quietLogger() hclog.Logger { return hclog.NewNullLogger() }

func testConfig() Config {
	return Config{ModelDir: tiny.dir, ModelName: testModel, Context: 2048, SnapshotEvery: 64, CacheBytes: 64 << 20,
		Logger: quietLogger(), PingInterval: 5 * time.Second}
}

// startServer starts a server on the shared tiny model; edit changes its config.
func startServer(t testing.TB, edit func(*Config)) *testServer {
	t.Helper()
	return startServerWith(t, tiny.model, edit)
}

// startServerWith starts a server on model.
func startServerWith(t testing.TB, model *exec.Model, edit func(*Config)) *testServer {
	t.Helper()
	ts, hs := newTestServer(t, model, edit)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		ts.sched.close()
		<-ts.sched.idle()
	})
	return ts
}

// startOwningServer starts a server on a model of its own and returns stop, which shuts
// the server down and frees its cache, its session and the model: for tests whose models
// are too large to keep two of (stop also runs at cleanup, once).
func startOwningServer(t testing.TB, model *exec.Model, edit func(*Config)) (*testServer, func()) {
	t.Helper()
	ts, hs := newTestServer(t, model, edit)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			hs.Close()
			ts.sched.close()
			<-ts.sched.idle()
			ts.runner.cache.clear()
			ts.runner.sess.Close()
			model.Close()
		})
	}
	t.Cleanup(stop)
	return ts, stop
}

// newTestServer loads model into a server of testConfig (edited by edit) that records
// its generations' traces, listening on an httptest server.
func newTestServer(t testing.TB, model *exec.Model, edit func(*Config)) (*testServer, *httptest.Server) {
	t.Helper()
	cfg := testConfig()
	if edit != nil {
		edit(&cfg)
	}
	s := New(cfg)
	ts := &testServer{Server: s}
	s.onFinish = func(g genTrace) {
		ts.mu.Lock()
		ts.traces = append(ts.traces, g)
		ts.mu.Unlock()
	}
	if err := s.Load(func() (*exec.Model, error) { return model, nil }); err != nil {
		t.Fatalf("load: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	ts.URL = hs.URL
	ts.client = hs.Client()
	return ts, hs
}

func (ts *testServer) lastTrace(t testing.TB) genTrace {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.traces) == 0 {
		t.Fatal("no generation ran")
	}
	return ts.traces[len(ts.traces)-1]
}

func (ts *testServer) traceCount() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.traces)
}

// post sends a JSON body (a string is sent verbatim) and returns status, headers, body.
func (ts *testServer) post(t testing.TB, path string, body any) (int, http.Header, []byte) {
	t.Helper()
	return ts.do(t, "POST", path, body, nil)
}

func (ts *testServer) do(t testing.TB, method, path string, body any, header map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// chatBody is a chat request with the defaults most tests use.
func chatBody(user string, extra map[string]any) map[string]any {
	b := map[string]any{
		"model":       testModel,
		"messages":    []map[string]any{{"role": "user", "content": user}},
		"max_tokens":  6,
		"temperature": 0,
	}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	} `json:"choices"`
	Usage   usage    `json:"usage"`
	Timings *timings `json:"timings"`
}

func (c *chatResp) content() string {
	if len(c.Choices) == 0 || c.Choices[0].Message.Content == nil {
		return ""
	}
	return *c.Choices[0].Message.Content
}

func (c *chatResp) reasoning() string {
	if len(c.Choices) == 0 || c.Choices[0].Message.ReasoningContent == nil {
		return ""
	}
	return *c.Choices[0].Message.ReasoningContent
}

// chat posts a chat request that must succeed.
func (ts *testServer) chat(t testing.TB, body map[string]any) chatResp {
	t.Helper()
	status, _, data := ts.post(t, "/v1/chat/completions", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	var r chatResp
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return r
}

type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// wantError checks that a response is an OpenAI error with the given status and, when
// not empty, param.
func wantError(t testing.TB, status int, hdr http.Header, data []byte, wantStatus int, wantParam string) apiErr {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, data)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error Content-Type %q", ct)
	}
	var e apiErr
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s is not an OpenAI error object: %v", data, err)
	}
	if e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error without message or type: %s", data)
	}
	if wantParam != "" && (e.Error.Param == nil || *e.Error.Param != wantParam) {
		t.Fatalf("param = %v, want %q: %s", e.Error.Param, wantParam, data)
	}
	return e
}

// sseEvent is one parsed event of a stream.
type sseEvent struct {
	comment bool
	data    string
}

// readSSE parses a whole event stream and checks the framing rules every stream keeps:
// "data: " with the space, one line per event, no empty data, [DONE] last, body ends.
func readSSE(t testing.TB, r io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		switch {
		case strings.HasPrefix(line, ":"):
			events = append(events, sseEvent{comment: true, data: line})
		case strings.HasPrefix(line, "data: "):
			payload := strings.TrimPrefix(line, "data: ")
			if payload == "" {
				t.Fatal("empty data event")
			}
			if len(line) > 64<<10 {
				t.Fatalf("event of %d bytes exceeds 64 KiB", len(line))
			}
			events = append(events, sseEvent{data: payload})
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
		expectBlank = true
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	var data []sseEvent
	for _, e := range events {
		if !e.comment {
			data = append(data, e)
		}
	}
	if len(data) == 0 || data[len(data)-1].data != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %v", events)
	}
	for _, e := range data[:len(data)-1] {
		if e.data == "[DONE]" {
			t.Fatal("[DONE] before the end")
		}
	}
	return events
}

type streamChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Index        int                        `json:"index"`
		Delta        map[string]json.RawMessage `json:"delta"`
		Text         *string                    `json:"text"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
	Timings *timings `json:"timings"`
}

// streamResult is a chat stream folded together.
type streamResult struct {
	chunks    []streamChunk
	hasUsage  []bool // per chunk: whether the "usage" key was present
	content   string
	reasoning string
	finish    string
	usage     *usage
	pings     int
	calls     map[int]*struct{ id, name, args string }
	raw       string
}

// streamChat posts a streaming chat request and checks the chunk invariants.
func (ts *testServer) streamChat(t testing.TB, body map[string]any) streamResult {
	t.Helper()
	b := map[string]any{"stream": true}
	for k, v := range body {
		b[k] = v
	}
	raw, _ := json.Marshal(b)
	resp, err := ts.client.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("stream status %d: %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	return foldChatStream(t, data)
}

func foldChatStream(t testing.TB, data []byte) streamResult {
	t.Helper()
	res := streamResult{raw: string(data), calls: map[int]*struct{ id, name, args string }{}}
	events := readSSE(t, bytes.NewReader(data))
	finishes := 0
	for _, e := range events {
		if e.comment {
			res.pings++
			continue
		}
		if e.data == "[DONE]" {
			break
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatalf("chunk %s: %v", e.data, err)
		}
		var keys map[string]json.RawMessage
		json.Unmarshal([]byte(e.data), &keys)
		_, hasUsage := keys["usage"]
		if c.Error != nil {
			t.Fatalf("in-band error: %s", e.data)
		}
		if c.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", c.Object)
		}
		if len(res.chunks) > 0 {
			first := res.chunks[0]
			if c.ID != first.ID || c.Created != first.Created || c.Model != first.Model {
				t.Fatalf("id/created/model changed mid-stream: %s", e.data)
			}
		}
		if len(c.Choices) == 0 {
			var u usage
			if err := json.Unmarshal(c.Usage, &u); err != nil || string(c.Usage) == "null" {
				t.Fatalf("empty-choices chunk without usage: %s", e.data)
			}
			res.usage = &u
		}
		for _, ch := range c.Choices {
			_, hasRole := ch.Delta["role"]
			if hasRole != (len(res.chunks) == 0) {
				t.Fatalf("role must be on the first chunk only: %s", e.data)
			}
			if ch.FinishReason != nil {
				finishes++
				res.finish = *ch.FinishReason
				if len(ch.Delta) != 0 {
					t.Fatalf("finish chunk delta not empty: %s", e.data)
				}
			}
			for k, v := range ch.Delta {
				switch k {
				case "content":
					var s string
					json.Unmarshal(v, &s)
					res.content += s
				case "reasoning_content":
					var s string
					json.Unmarshal(v, &s)
					res.reasoning += s
				case "tool_calls":
					var calls []struct {
						Index    *int    `json:"index"`
						ID       *string `json:"id"`
						Function struct {
							Name      *string `json:"name"`
							Arguments string  `json:"arguments"`
						} `json:"function"`
					}
					if err := json.Unmarshal(v, &calls); err != nil {
						t.Fatal(err)
					}
					for _, tc := range calls {
						if tc.Index == nil {
							t.Fatalf("tool call delta without index: %s", e.data)
						}
						acc := res.calls[*tc.Index]
						if acc == nil {
							acc = &struct{ id, name, args string }{}
							res.calls[*tc.Index] = acc
						}
						if tc.ID != nil {
							acc.id += *tc.ID
						}
						if tc.Function.Name != nil {
							acc.name += *tc.Function.Name
						}
						acc.args += tc.Function.Arguments
					}
				case "reasoning": // the same text as reasoning_content, under the newer name
					if string(v) != string(ch.Delta["reasoning_content"]) {
						t.Fatalf("reasoning differs from reasoning_content: %s", e.data)
					}
				case "role":
				default:
					t.Fatalf("unexpected delta key %q", k)
				}
			}
		}
		res.chunks = append(res.chunks, c)
		res.hasUsage = append(res.hasUsage, hasUsage)
	}
	if finishes != 1 {
		t.Fatalf("%d chunks carry a finish_reason, want exactly 1", finishes)
	}
	return res
}

// cancelCtx is a context for a client that gives up.
func cancelCtx(t testing.TB) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, cancel
}
