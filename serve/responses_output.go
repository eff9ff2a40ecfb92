package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// The Responses API's output: the same deltas the chat formats are made of (reasoning,
// content, tool-call fragments from the one output pipeline), folded into output items.
// One builder makes both the streamed events and the final item list, so a stream's
// items are exactly the non-streamed response's.
//
// Reasoning is one item with the thinking as reasoning_text content and, the same
// text again, as its summary: the AI SDK reads only summaries, Codex shows summaries
// and keeps the raw text for show_raw_agent_reasoning, and there is no other summary
// to give. Streamed, it is sent as reasoning_text and reasoning_summary_text deltas.

type outputTextPart struct {
	Type        string `json:"type"` // output_text
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type textPart struct {
	Type string `json:"type"` // summary_text, reasoning_text
	Text string `json:"text"`
}

type messageItem struct {
	Type    string           `json:"type"` // message
	ID      string           `json:"id"`
	Status  string           `json:"status"`
	Role    string           `json:"role"`
	Content []outputTextPart `json:"content"`
}

type reasoningItem struct {
	Type             string     `json:"type"` // reasoning
	ID               string     `json:"id"`
	Status           string     `json:"status"`
	Summary          []textPart `json:"summary"`
	Content          []textPart `json:"content"`
	EncryptedContent *string    `json:"encrypted_content"`
}

type functionCallItem struct {
	Type      string `json:"type"` // function_call
	ID        string `json:"id"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// responsesBuilder folds deltas into output items and reports each step as an event.
type responsesBuilder struct {
	// emit, when set (streaming), receives every event; an error stops the stream.
	emit    func(ev map[string]any) error
	emitErr error

	items    []any
	open     int    // index of the item being written, -1 none
	openKind string // its type
	text     strings.Builder
}

func newResponsesBuilder() *responsesBuilder { return &responsesBuilder{open: -1} }

func (b *responsesBuilder) event(typ string, fields map[string]any) {
	if b.emit == nil || b.emitErr != nil {
		return
	}
	fields["type"] = typ
	b.emitErr = b.emit(fields)
}

// itemEvent is an event about the open item (item_id and output_index set).
func (b *responsesBuilder) itemEvent(typ string, fields map[string]any) {
	fields["item_id"] = b.openID()
	fields["output_index"] = b.open
	b.event(typ, fields)
}

func (b *responsesBuilder) openID() string {
	switch it := b.items[b.open].(type) {
	case *messageItem:
		return it.ID
	case *reasoningItem:
		return it.ID
	case *functionCallItem:
		return it.ID
	}
	return ""
}

func (b *responsesBuilder) push(ds []outDelta) error {
	for _, d := range ds {
		switch {
		case d.Reasoning != "":
			if b.openKind != "reasoning" {
				b.close("completed")
				b.start(&reasoningItem{Type: "reasoning", ID: newID("rs_"), Status: "in_progress", Summary: []textPart{}, Content: []textPart{}})
				b.itemEvent("response.reasoning_summary_part.added", map[string]any{"summary_index": 0, "part": textPart{Type: "summary_text"}})
				b.itemEvent("response.content_part.added", map[string]any{"content_index": 0, "part": textPart{Type: "reasoning_text"}})
			}
			b.text.WriteString(d.Reasoning)
			for _, piece := range splitText(d.Reasoning, maxEventText) {
				b.itemEvent("response.reasoning_summary_text.delta", map[string]any{"summary_index": 0, "delta": piece})
				b.itemEvent("response.reasoning_text.delta", map[string]any{"content_index": 0, "delta": piece})
			}
		case d.Content != "":
			if b.openKind != "message" {
				b.openMessage()
			}
			b.text.WriteString(d.Content)
			for _, piece := range splitText(d.Content, maxEventText) {
				b.itemEvent("response.output_text.delta", map[string]any{"content_index": 0, "delta": piece, "logprobs": []any{}})
			}
		case d.ToolCall != nil:
			tc := d.ToolCall
			if tc.Name != "" {
				b.close("completed")
				id := tc.ID
				if id == "" {
					id = newID("call_")
				}
				b.start(&functionCallItem{Type: "function_call", ID: newID("fc_"), Status: "in_progress", CallID: id, Name: tc.Name})
			}
			if tc.Arguments != "" && b.openKind == "function_call" {
				b.text.WriteString(tc.Arguments)
				for _, piece := range splitText(tc.Arguments, maxEventText) {
					b.itemEvent("response.function_call_arguments.delta", map[string]any{"delta": piece})
				}
			}
		}
	}
	return b.emitErr
}

func (b *responsesBuilder) openMessage() {
	b.close("completed")
	b.start(&messageItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []outputTextPart{}})
	b.itemEvent("response.content_part.added", map[string]any{"content_index": 0, "part": emptyOutputText()})
}

func emptyOutputText() outputTextPart {
	return outputTextPart{Type: "output_text", Annotations: []any{}, Logprobs: []any{}}
}

func (b *responsesBuilder) start(item any) {
	b.items = append(b.items, item)
	b.open = len(b.items) - 1
	b.text.Reset()
	switch item.(type) {
	case *messageItem:
		b.openKind = "message"
	case *reasoningItem:
		b.openKind = "reasoning"
	case *functionCallItem:
		b.openKind = "function_call"
	}
	b.event("response.output_item.added", map[string]any{"output_index": b.open, "item": item})
}

// close finishes the open item with status (completed, or incomplete for the item the
// generation was cut in).
func (b *responsesBuilder) close(status string) {
	if b.open < 0 {
		return
	}
	text := b.text.String()
	switch it := b.items[b.open].(type) {
	case *messageItem:
		part := emptyOutputText()
		part.Text = text
		b.itemEvent("response.output_text.done", map[string]any{"content_index": 0, "text": text, "logprobs": []any{}})
		b.itemEvent("response.content_part.done", map[string]any{"content_index": 0, "part": part})
		it.Content, it.Status = []outputTextPart{part}, status
	case *reasoningItem:
		b.itemEvent("response.reasoning_text.done", map[string]any{"content_index": 0, "text": text})
		b.itemEvent("response.content_part.done", map[string]any{"content_index": 0, "part": textPart{Type: "reasoning_text", Text: text}})
		b.itemEvent("response.reasoning_summary_text.done", map[string]any{"summary_index": 0, "text": text})
		b.itemEvent("response.reasoning_summary_part.done", map[string]any{"summary_index": 0, "part": textPart{Type: "summary_text", Text: text}})
		it.Summary = []textPart{{Type: "summary_text", Text: text}}
		it.Content = []textPart{{Type: "reasoning_text", Text: text}}
		it.Status = status
	case *functionCallItem:
		if text == "" {
			text = "{}"
		}
		b.itemEvent("response.function_call_arguments.done", map[string]any{"name": it.Name, "arguments": text})
		it.Arguments, it.Status = text, status
	}
	b.event("response.output_item.done", map[string]any{"output_index": b.open, "item": b.items[b.open]})
	b.open, b.openKind = -1, ""
	b.text.Reset()
}

// finish closes the last item. A response always holds a message or a call: an answer
// with neither (nothing, or reasoning alone) gets an empty message, so an agent sees a
// final answer rather than asking again.
func (b *responsesBuilder) finish(status string) error {
	hasAnswer := false
	for _, it := range b.items {
		switch it.(type) {
		case *messageItem, *functionCallItem:
			hasAnswer = true
		}
	}
	if !hasAnswer {
		b.openMessage()
	}
	b.close(status)
	return b.emitErr
}

// The response object (the spec's Response): what was asked, echoed, and what came out.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	CompletedAt        *int64            `json:"completed_at"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  *incompleteReason `json:"incomplete_details"`
	Instructions       json.RawMessage   `json:"instructions"`
	MaxOutputTokens    json.RawMessage   `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          reasoningEcho     `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	TopP               float64           `json:"top_p"`
	Text               json.RawMessage   `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []json.RawMessage `json:"tools"`
	Truncation         string            `json:"truncation"`
	Usage              *responseUsage    `json:"usage,omitempty"`
	Metadata           json.RawMessage   `json:"metadata"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteReason struct {
	Reason string `json:"reason"`
}

type reasoningEcho struct {
	Effort  json.RawMessage `json:"effort"`
	Summary json.RawMessage `json:"summary"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens     int `json:"cached_tokens"`
		CacheWriteTokens int `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func (s *Server) responseObject(x *exchange, req *responsesRequest, status string, output []any) *responseObject {
	g := x.p.gen.Sampling
	r := &responseObject{ID: x.id, Object: "response", CreatedAt: x.created, Status: status,
		Instructions: req.instructions, MaxOutputTokens: req.maxOutput, Model: x.model, Output: output,
		ParallelToolCalls: req.parallel, Reasoning: reasoningEcho{req.effort, req.summary}, Store: req.store,
		Temperature: g.Temperature, TopP: g.TopP, Text: json.RawMessage(`{"format":{"type":"text"}}`),
		ToolChoice: req.toolChoice, Tools: req.tools, Truncation: "disabled", Metadata: req.metadata}
	if output == nil {
		r.Output = []any{}
	}
	if r.Tools == nil {
		r.Tools = []json.RawMessage{}
	}
	if isNull(r.ToolChoice) {
		r.ToolChoice = json.RawMessage(`"auto"`)
	}
	if isNull(r.Metadata) {
		r.Metadata = json.RawMessage(`{}`)
	}
	if req.previous != "" {
		r.PreviousResponseID = &req.previous
	}
	if req.textFormat != nil {
		r.Text = marshalJSON(map[string]json.RawMessage{"format": req.textFormat})
	}
	return r
}

// finishResponse sets what is known once generation ended.
func (s *Server) finishResponse(r *responseObject, x *exchange) {
	u := x.usage()
	ru := &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	ru.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	if s.cfg.CacheBytes > 0 {
		// The end of every prompt is snapshotted: what was not cached is now.
		ru.InputTokensDetails.CacheWriteTokens = u.PromptTokens - u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		ru.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	r.Usage = ru
	if r.Status == "completed" {
		now := time.Now().Unix()
		r.CompletedAt = &now
	} else if r.Status == "incomplete" {
		r.IncompleteDetails = &incompleteReason{Reason: "max_output_tokens"}
	}
}

// responseStatus is the Responses status of a finished generation: cut by the token
// limit (or the context) it is incomplete.
func responseStatus(x *exchange) string {
	if x.finishReason() == "length" {
		return "incomplete"
	}
	return "completed"
}

// answerResponses waits for the generation and writes it as a Responses API answer.
func (s *Server) answerResponses(x *exchange, req *responsesRequest, ctx context.Context, cancel context.CancelFunc,
	w http.ResponseWriter, j *job, events <-chan []outDelta) {
	b := newResponsesBuilder()
	if !x.p.gen.Stream {
		err := x.wait(ctx, j, events, func(ds []outDelta) error { x.collect(ds); return b.push(ds) }, nil)
		if err != nil || (x.runErr != nil && ctx.Err() != nil) {
			if x.shutDown() {
				writeError(w, errShuttingDown())
				return
			}
			s.logCancelled(w, x.id, err)
			return
		}
		if j.rejected != nil {
			writeError(w, j.rejected)
			return
		}
		if x.runErr != nil {
			writeError(w, engineError(x.runErr))
			return
		}
		status := responseStatus(x)
		b.finish(status)
		r := s.responseObject(x, req, status, b.items)
		s.finishResponse(r, x)
		s.keepResponse(x, req, b.items)
		writeJSON(w, http.StatusOK, r)
		return
	}

	sse := newSSEWriter(w, s.cfg.WriteTimeout)
	lastWrite := time.Now()
	seq := 0
	b.emit = func(ev map[string]any) error {
		ev["sequence_number"] = seq
		seq++
		lastWrite = time.Now()
		if err := sse.namedEvent(ev["type"].(string), ev); err != nil {
			cancel() // the client is gone or stuck: stop the engine
			return err
		}
		return nil
	}
	abandon := func() {
		cancel()
		x.wait(ctx, j, events, func([]outDelta) error { return nil }, nil)
		s.logCancelled(w, x.id, sse.failed)
	}
	if err := sse.start(); err != nil {
		abandon()
		return
	}
	created := s.responseObject(x, req, "in_progress", nil)
	b.event("response.created", map[string]any{"response": created})
	b.event("response.in_progress", map[string]any{"response": created})
	if b.emitErr != nil {
		abandon()
		return
	}
	onTick := func() error {
		if time.Since(lastWrite) < s.cfg.PingInterval/2 {
			return nil
		}
		lastWrite = time.Now()
		if err := sse.ping(); err != nil {
			cancel()
			return err
		}
		return nil
	}
	err := x.wait(ctx, j, events, func(ds []outDelta) error { x.collect(ds); return b.push(ds) }, onTick)
	var failure *apiError
	switch {
	case (err != nil || (x.runErr != nil && ctx.Err() != nil)) && x.shutDown() && sse.failed == nil:
		failure = errShuttingDown()
	case err != nil || (x.runErr != nil && ctx.Err() != nil):
		s.logCancelled(w, x.id, err)
		return
	case j.rejected != nil:
		failure = j.rejected
	case x.runErr != nil:
		failure = engineError(x.runErr)
	}
	if failure != nil {
		// After the 200 a failure is the terminal event, with what was made so far.
		b.emitErr = nil
		b.close("incomplete")
		r := s.responseObject(x, req, "failed", b.items)
		code := failure.Code
		if code == "" {
			code = "server_error"
		}
		r.Error = &responseError{Code: code, Message: failure.Message}
		b.emitErr = nil
		b.event("response.failed", map[string]any{"response": r})
		return
	}
	status := responseStatus(x)
	if b.finish(status) != nil {
		return
	}
	r := s.responseObject(x, req, status, b.items)
	s.finishResponse(r, x)
	s.keepResponse(x, req, b.items)
	b.event("response."+status, map[string]any{"response": r})
}

// namedEvent sends one event with its name on an "event:" line, as the Responses API
// streams (clients also read the type inside the data).
func (s *sseWriter) namedEvent(name string, v any) error {
	payload := marshalJSON(v)
	buf := make([]byte, 0, len(payload)+len(name)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	return s.flushRaw(buf)
}

// keepResponse stores the conversation so far for previous_response_id, and the output
// items for item_reference.
func (s *Server) keepResponse(x *exchange, req *responsesRequest, output []any) {
	if !req.store {
		return
	}
	msg := map[string]any{"role": "assistant"}
	if content := x.content.String(); content != "" || len(x.calls) == 0 {
		msg["content"] = content
	}
	if x.reasoning.Len() > 0 {
		msg["reasoning_content"] = x.reasoning.String()
	}
	if len(x.calls) > 0 {
		msg["tool_calls"] = x.calls
	}
	history := append(append([]json.RawMessage{}, req.history...), marshalJSON(msg))
	items := map[string]inputItem{}
	for _, it := range output {
		switch it := it.(type) {
		case *messageItem:
			items[it.ID] = inputItem{kind: "message", role: "assistant", text: it.Content[0].Text}
		case *reasoningItem:
			items[it.ID] = inputItem{kind: "reasoning", text: it.Content[0].Text}
		case *functionCallItem:
			items[it.ID] = inputItem{kind: "function_call", callID: it.CallID, name: it.Name, arguments: it.Arguments}
		}
	}
	s.responseStore.put(x.id, history, items)
}
