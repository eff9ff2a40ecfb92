package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"pistil/models/chat"
)

// prepared is a validated request turned into engine input, ready to queue.
type prepared struct {
	chat      bool // chat.completion vs text_completion
	gen       genRequest
	prompt    []int32
	splits    []int // canonical prefill split points (see messageSplits)
	maxTokens int
	thinking  bool // the output starts inside <think>
	newParser func() deltaParser
	// answer, when set, writes the response in place of the chat and text formats (the
	// Responses API does), with ids starting idPrefix.
	answer   func(x *exchange, ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, j *job, events <-chan []outDelta)
	idPrefix string
	// constraint, when set, is the grammar the output follows.
	constraint *constraint
}

// readBody enforces the content type and the body limit, and reads the whole body (so
// that net/http starts watching the connection for a client that goes away).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, &apiError{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
				Message: fmt.Sprintf("Content-Type must be application/json, got %q", truncate(ct, 80))}
		}
	}
	limit := s.maxBody()
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	// The http.Server has no ReadTimeout (it would cut long streams), so a client that
	// stops sending its body would hold the handler forever: bound the read here. The
	// deadline is lifted once the body is in; after a failed read it stays, or net/http
	// would wait for the rest of the body before sending the error.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.WriteTimeout))
	body, err := readAllSized(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if err != nil {
		return nil, bodyReadError(err, limit, s.cfg.WriteTimeout)
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

func tooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	p, ok := s.prepare(w, r, func(body []byte) (*prepared, *apiError) {
		req, e := parseChatRequest(body)
		if e != nil {
			return nil, e
		}
		return s.prepareChat(req)
	})
	if ok {
		s.execute(w, r, p)
	}
}

// prepareChat renders the template, tokenizes and checks the context: every way the
// request can fail is found here, before the first response byte.
func (s *Server) prepareChat(req *chatRequest) (*prepared, *apiError) {
	if e := s.checkReady(); e != nil {
		return nil, e
	}
	if !s.knownModel(req.Model) {
		return nil, unknownModel(req.Model)
	}
	s.samplingDefaults.apply(&req.genRequest)
	if req.EnableThinking == nil {
		req.EnableThinking = s.cfg.Thinking
	}
	opts := chat.RenderOptions{
		Messages:            toTemplateMessages(req.Messages),
		AddGenerationPrompt: true,
		EnableThinking:      req.EnableThinking,
		PreserveThinking:    req.Preserve,
	}
	var tools []json.RawMessage
	if req.ToolsEnabled {
		for _, t := range req.Tools {
			tools = append(tools, t.Raw)
		}
		opts.Tools = tools
	}
	rendered, e := s.renderChat(opts, "messages")
	if e != nil {
		return nil, e
	}
	prompt := rendered.IDs
	p := &prepared{chat: true, gen: req.genRequest, prompt: prompt, thinking: chat.PromptEndsInReasoning(rendered.Text)}

	p.splits = s.messageSplits(prompt)
	if p.constraint = req.Constraint; p.constraint != nil {
		if _, err := s.constrainVocab(); err != nil {
			return nil, internalError("structured output: " + err.Error())
		}
	}
	thinking, parseTools := p.thinking, req.ToolsEnabled
	p.newParser = func() deltaParser {
		return chatParser{chat.NewParser(chat.ParserOptions{StartInReasoning: thinking, ParseTools: parseTools, Tools: tools})}
	}
	if e := s.fitContext(p, "messages"); e != nil {
		return nil, e
	}
	return p, nil
}

// messageSplits returns the position just after each message header
// ("<|im_start|>role\n") in prompt. Prefill is cut and snapshotted there. Each point
// depends only on the tokens before it, so two prompts that share a prefix are cut the
// same way within it, and a restored snapshot carries exactly the floating-point state a
// cold prefill of the same prefix computes. The header of the generation prompt is where
// the next turn diverges from this one when the template drops this turn's reasoning.
func (s *Server) messageSplits(prompt []int32) []int {
	if s.imStart < 0 {
		return nil
	}
	var points []int
	for i, id := range prompt {
		if id != s.imStart {
			continue
		}
		for j := i + 1; j < len(prompt) && j <= i+8; j++ {
			if strings.Contains(s.tok.Decode(prompt[j:j+1]), "\n") {
				points = append(points, j+1)
				break
			}
		}
	}
	return points
}

// fitContext rejects prompts that do not fit and clamps max_tokens to what is left.
func (s *Server) fitContext(p *prepared, param string) *apiError {
	capacity := s.runner.sess.Capacity()
	if len(p.prompt) >= capacity {
		return contextExceeded(param, capacity, len(p.prompt), true)
	}
	left := capacity - len(p.prompt)
	p.maxTokens = p.gen.MaxTokens
	if p.maxTokens <= 0 || p.maxTokens > left {
		p.maxTokens = left
	}
	return nil
}

func toTemplateMessages(in []chatMessage) []chat.Message {
	out := make([]chat.Message, len(in))
	for i, m := range in {
		cm := chat.Message{Role: m.Role, ReasoningContent: m.ReasoningContent, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Content != nil {
			cm.Content = *m.Content
		}
		for _, c := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chat.ToolCall{ID: c.ID, Type: "function",
				Function: chat.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
		}
		out[i] = cm
	}
	return out
}

// chatParser adapts chat.Parser to the pipeline.
type chatParser struct{ p *chat.Parser }

func (c chatParser) Push(text string) []outDelta { return convertDeltas(c.p.Push(text)) }
func (c chatParser) Finish() []outDelta          { return convertDeltas(c.p.Finish()) }

func convertDeltas(ds []chat.Delta) []outDelta {
	if len(ds) == 0 {
		return nil
	}
	out := make([]outDelta, len(ds))
	for i, d := range ds {
		out[i] = outDelta{Reasoning: d.Reasoning, Content: d.Content}
		if tc := d.ToolCall; tc != nil {
			out[i].ToolCall = &toolCallDelta{Index: tc.Index, ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments}
		}
	}
	return out
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	p, ok := s.prepare(w, r, func(body []byte) (*prepared, *apiError) {
		req, e := parseCompletionRequest(body)
		if e != nil {
			return nil, e
		}
		return s.prepareCompletion(req)
	})
	if ok {
		s.execute(w, r, p)
	}
}

func (s *Server) prepareCompletion(req *completionRequest) (*prepared, *apiError) {
	if e := s.checkReady(); e != nil {
		return nil, e
	}
	if !s.knownModel(req.Model) {
		return nil, unknownModel(req.Model)
	}
	s.samplingDefaults.apply(&req.genRequest)
	prompt := req.PromptTokens
	if prompt == nil {
		capacity := s.runner.sess.Capacity()
		var complete bool
		if prompt, complete = s.encodeRaw(req.Prompt, req.ParseSpecial, capacity-1); !complete {
			return nil, contextExceeded("prompt", capacity, 0, false)
		}
	}
	if len(prompt) == 0 {
		return nil, invalidValue("prompt", "prompt must not be empty")
	}
	vocab := s.tok.VocabSize()
	for i, id := range prompt {
		if int(id) >= vocab {
			return nil, invalidValue(fmt.Sprintf("prompt[%d]", i), "token id %d is outside the vocabulary of %d", id, vocab)
		}
	}
	// Cut at message headers too, as chat prompts are: both endpoints share the prefix
	// cache, and a snapshot is exact only for a prompt cut at the same points.
	p := &prepared{gen: req.genRequest, prompt: prompt, splits: s.messageSplits(prompt),
		newParser: func() deltaParser { return plainParser{} }, constraint: req.Constraint}
	if p.constraint != nil {
		if _, err := s.constrainVocab(); err != nil {
			return nil, internalError("structured output: " + err.Error())
		}
	}
	if e := s.fitContext(p, "prompt"); e != nil {
		return nil, e
	}
	return p, nil
}
