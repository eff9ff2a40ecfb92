package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// maxEventText bounds the text of one SSE event, so clients with a 64 KiB line limit
// (older openai-go, bufio.Scanner) never see a line too long.
const maxEventText = 16 << 10

// exchange is one admitted request from queueing to its last byte.
type exchange struct {
	s *Server
	// client is the request's own context: when it is still alive but the work was
	// cancelled, the server is shutting down and says so.
	client  context.Context
	p       *prepared
	id      string
	created int64
	model   string

	// Filled by the engine goroutine; read by the handler after job.finished closes.
	res    genResult
	runErr error

	// Output accumulated for the non-streamed response (and counted for streams).
	content, reasoning strings.Builder
	calls              []toolCallJSON
	callIndex          map[int]int  // parser's tool call index -> position in calls
	announced          map[int]bool // positions whose id and name were streamed
	logprobs           []tokenLogprob
	streamedText       int // bytes of completion text whose logprobs were streamed (text_offset)
}

// execute queues p, runs it on the engine and answers, streamed or not.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, p *prepared) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopOnShutdown := context.AfterFunc(s.base, cancel)
	defer stopOnShutdown()

	x := &exchange{s: s, p: p, client: r.Context(), created: time.Now().Unix(), model: s.name, callIndex: map[int]int{}, announced: map[int]bool{}}
	switch {
	case p.idPrefix != "":
		x.id = newID(p.idPrefix)
	case p.chat:
		x.id = newID("chatcmpl-")
	default:
		x.id = newID("cmpl-")
	}
	events := make(chan []outDelta, 256)
	j := newJob(ctx, func() { x.run(ctx, events) })
	if e := s.sched.submit(j); e != nil {
		writeError(w, e)
		return
	}
	// stream and respond return only once the engine is done with the job (or it left
	// the queue unrun), so x.res and x.runErr are settled here.
	defer func() { noteGeneration(w, x.res, x.runErr) }()
	switch {
	case p.answer != nil:
		p.answer(x, ctx, cancel, w, j, events)
	case p.gen.Stream:
		x.stream(ctx, cancel, w, j, events)
	default:
		x.respond(ctx, w, j, events)
	}
}

// run executes on the scheduler goroutine.
func (x *exchange) run(ctx context.Context, events chan<- []outDelta) {
	s, p := x.s, x.p
	send := func(ds []outDelta) {
		if len(ds) == 0 {
			return
		}
		select {
		case events <- ds:
		case <-ctx.Done():
		}
	}
	pipe := newPipeline(s.tok.NewStreamDecoder(), p.gen.Stop, p.newParser())
	stopTokens := s.stopTokens
	if p.gen.IgnoreEOS {
		stopTokens = nil
	}
	sampler, recorder, err := s.samplerFor(p)
	feed := &logprobFeed{rec: recorder}
	task := &genTask{
		prompt:     p.prompt,
		splits:     p.splits,
		maxTokens:  p.maxTokens,
		sampler:    sampler,
		stopTokens: stopTokens,
		onToken: func(id int32) bool {
			ds, stop := pipe.push(id)
			feed.token()
			send(feed.attach(ds, false))
			return stop
		},
	}
	if recorder != nil {
		task.onLogits = recorder.record
	}
	if err != nil {
		x.runErr = err
	} else if x.res, x.runErr = s.runner.run(ctx, task); x.runErr == nil {
		send(feed.attach(pipe.finish(), true))
	}
	if errors.Is(x.runErr, context.Canceled) || errors.Is(x.runErr, context.DeadlineExceeded) || ctx.Err() != nil {
		s.metrics.cancelled.Add(1)
	} else if x.runErr != nil {
		s.engineLog.Error("generation failed", "request", x.id, "prompt_tokens", len(p.prompt), "error", x.runErr)
	}
	s.metrics.noteSpeeds(x.res.PromptTokens-x.res.CachedTokens, x.res.PrefillTime.Seconds(),
		max(len(x.res.Tokens)-1, 0), x.res.DecodeTime.Seconds())
	if s.onFinish != nil {
		s.onFinish(genTrace{Prompt: p.prompt, Result: x.res, Err: x.runErr})
	}
}

// wait consumes events until the job is done. onDeltas sees each batch; onTick runs on
// the ping interval. An error (the client went away, or a write to it failed and cancelled
// ctx) is returned only once the job has left the queue or the engine has stopped, so no
// engine work outlives the handler.
func (x *exchange) wait(ctx context.Context, j *job, events <-chan []outDelta, onDeltas func([]outDelta) error, onTick func() error) (err error) {
	defer func() {
		if err != nil {
			if x.s.sched.withdraw(j) {
				x.s.metrics.cancelled.Add(1)
			} else {
				<-j.finished // the engine notices the cancelled ctx within one step
			}
		}
	}()
	ticker := time.NewTicker(x.s.cfg.PingInterval)
	defer ticker.Stop()
	for {
		select {
		case ds := <-events:
			if err := onDeltas(ds); err != nil {
				return err
			}
		case <-j.finished:
			for {
				select {
				case ds := <-events:
					if err := onDeltas(ds); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ticker.C:
			if onTick != nil {
				if err := onTick(); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// collect folds deltas into the accumulated message.
func (x *exchange) collect(ds []outDelta) {
	for _, d := range ds {
		x.content.WriteString(d.Content)
		x.reasoning.WriteString(d.Reasoning)
		x.logprobs = append(x.logprobs, d.Logprobs...)
		if tc := d.ToolCall; tc != nil {
			i, ok := x.callIndex[tc.Index]
			if !ok {
				i = len(x.calls)
				x.callIndex[tc.Index] = i
				id := tc.ID
				if id == "" {
					id = newID("call_")
				}
				x.calls = append(x.calls, toolCallJSON{ID: id, Type: "function", Function: functionJSON{Name: tc.Name}})
			}
			x.calls[i].Function.Arguments += tc.Arguments
		}
	}
}

func (x *exchange) finishReason() string {
	if x.res.Finish == "stop" && len(x.calls) > 0 {
		return "tool_calls"
	}
	return x.res.Finish
}

func (x *exchange) usage() usage {
	r := x.res
	u := usage{PromptTokens: r.PromptTokens, CompletionTokens: len(r.Tokens), TotalTokens: r.PromptTokens + len(r.Tokens),
		PromptTokensDetails: promptDetails{CachedTokens: r.CachedTokens}}
	if x.p.chat {
		u.CompletionTokensDetails = &completionDetails{ReasoningTokens: x.reasoningTokens()}
	}
	return u
}

// reasoningTokens counts the generated tokens before </think> (all of them when the
// output never left the reasoning block).
func (x *exchange) reasoningTokens() int {
	if !x.p.thinking {
		return 0
	}
	n := 0
	for _, id := range x.res.Tokens {
		if id == x.s.thinkClose {
			return n + 1
		}
		if x.s.stopTokens[id] && !x.p.gen.IgnoreEOS {
			break
		}
		n++
	}
	return n
}

func (x *exchange) timings() *timings {
	r := x.res
	t := &timings{CacheN: r.CachedTokens, PromptN: r.PromptTokens - r.CachedTokens,
		PromptMS: ms(r.PrefillTime), PredictedN: len(r.Tokens), PredictedMS: ms(r.DecodeTime)}
	if r.PrefillTime > 0 {
		t.PromptPerSecond = float64(t.PromptN) / r.PrefillTime.Seconds()
	}
	if r.DecodeTime > 0 && t.PredictedN > 1 {
		t.PredictedPerSecond = float64(t.PredictedN-1) / r.DecodeTime.Seconds()
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// engineError is the client-facing message for a failed generation: no paths, no Go
// internals beyond the engine's own description.
func engineError(err error) *apiError {
	return internalError("generation failed: " + err.Error())
}

// respond waits for the whole generation and writes one JSON response.
func (x *exchange) respond(ctx context.Context, w http.ResponseWriter, j *job, events <-chan []outDelta) {
	err := x.wait(ctx, j, events, func(ds []outDelta) error { x.collect(ds); return nil }, nil)
	if err != nil || (x.runErr != nil && ctx.Err() != nil) {
		if x.shutDown() {
			writeError(w, errShuttingDown())
			return
		}
		x.s.logCancelled(w, x.id, err)
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
	finish := x.finishReason()
	if x.p.chat {
		msg := responseMessage{Role: "assistant", ToolCalls: x.calls}
		content := x.content.String()
		if content != "" || len(x.calls) == 0 {
			msg.Content = &content
		}
		if x.reasoning.Len() > 0 {
			r := x.reasoning.String()
			msg.ReasoningContent, msg.Reasoning = &r, &r
		}
		writeJSON(w, http.StatusOK, chatResponse{ID: x.id, Object: "chat.completion", Created: x.created, Model: x.model,
			Choices:           []chatChoice{{Index: 0, Message: msg, Logprobs: x.logprobsJSON(x.logprobs), FinishReason: finish}},
			Usage:             x.usage(),
			SystemFingerprint: systemFingerprint, Timings: x.timings()})
		return
	}
	writeJSON(w, http.StatusOK, textResponse{ID: x.id, Object: "text_completion", Created: x.created, Model: x.model,
		Choices:           []textChoice{{Text: x.content.String(), Index: 0, Logprobs: x.logprobsJSON(x.logprobs), FinishReason: &finish}},
		Usage:             x.usage(),
		SystemFingerprint: systemFingerprint, Timings: x.timings()})
}

// shutDown reports whether the request was cancelled by the server's shutdown while its
// client is still there.
func (x *exchange) shutDown() bool {
	return x.s.base.Err() != nil && x.client.Err() == nil
}

// logCancelled logs a request its client ended and counts it as 499, also when a stream's
// 200 is already out.
func (s *Server) logCancelled(w http.ResponseWriter, id string, err error) {
	noteStatus(w, statusClientClosed)
	if err == nil {
		err = context.Canceled
	}
	s.cfg.Logger.Info("request ended by the client", "id", id, "status", statusClientClosed, "reason", err)
}

// stream sends the response as server-sent events.
func (x *exchange) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, j *job, events <-chan []outDelta) {
	sse := newSSEWriter(w, x.s.cfg.WriteTimeout)
	lastWrite := time.Now()
	emit := func(v any) error {
		lastWrite = time.Now()
		if err := sse.event(v); err != nil {
			cancel() // the client is gone or stuck: stop the engine
			return err
		}
		return nil
	}
	// The job is queued already: a stream that fails here still has to take it out of
	// the queue (wait does, once ctx is cancelled), or it holds a slot until it would run.
	abandon := func() {
		cancel()
		x.wait(ctx, j, events, func([]outDelta) error { return nil }, nil)
		x.s.logCancelled(w, x.id, sse.failed)
	}
	if err := sse.start(); err != nil {
		abandon()
		return
	}
	if x.p.chat {
		empty := ""
		if emit(x.chatChunk(chunkDelta{Role: "assistant", Content: &empty}, nil)) != nil {
			abandon()
			return
		}
	}
	onDeltas := func(ds []outDelta) error {
		x.collect(ds)
		for _, v := range x.chunks(ds) {
			if err := emit(v); err != nil {
				return err
			}
		}
		return nil
	}
	onTick := func() error {
		if time.Since(lastWrite) < x.s.cfg.PingInterval/2 {
			return nil
		}
		lastWrite = time.Now()
		if err := sse.ping(); err != nil {
			cancel()
			return err
		}
		return nil
	}
	err := x.wait(ctx, j, events, onDeltas, onTick)
	var failure *apiError
	switch {
	case (err != nil || (x.runErr != nil && ctx.Err() != nil)) && x.shutDown() && sse.failed == nil:
		failure = errShuttingDown()
	case err != nil || (x.runErr != nil && ctx.Err() != nil):
		x.s.logCancelled(w, x.id, err)
		return
	case j.rejected != nil:
		failure = j.rejected
	case x.runErr != nil:
		failure = engineError(x.runErr)
	}
	if failure != nil {
		// After the 200 an error can only travel in-band, then the stream ends normally.
		if sse.event(failure.body()) == nil {
			sse.done()
		}
		return
	}
	finish := x.finishReason()
	var final any
	if x.p.chat {
		c := x.chatChunk(chunkDelta{}, &finish)
		c.Timings = x.timings()
		final = c
	} else {
		c := x.textChunk("", &finish)
		c.Timings = x.timings()
		final = c
	}
	if emit(final) != nil {
		return
	}
	if x.p.gen.IncludeUsage {
		u := x.usage()
		var last any
		if x.p.chat {
			last = chatChunk{ID: x.id, Object: "chat.completion.chunk", Created: x.created, Model: x.model,
				SystemFingerprint: systemFingerprint, Choices: []chunkChoice{}, Usage: u}
		} else {
			last = textResponse{ID: x.id, Object: "text_completion", Created: x.created, Model: x.model,
				SystemFingerprint: systemFingerprint, Choices: []textChoice{}, Usage: u}
		}
		if emit(last) != nil {
			return
		}
	}
	sse.done()
}

// chunks turns deltas into stream chunks, merging neighbours of the same kind and
// splitting text longer than maxEventText.
func (x *exchange) chunks(ds []outDelta) (out []any) {
	flushText := func(kind int, text string) {
		for _, piece := range splitText(text, maxEventText) {
			p := piece
			if !x.p.chat {
				out = append(out, x.textChunk(p, nil))
			} else if kind == 1 {
				out = append(out, x.chatChunk(chunkDelta{ReasoningContent: &p, Reasoning: &p}, nil))
			} else {
				out = append(out, x.chatChunk(chunkDelta{Content: &p}, nil))
			}
		}
	}
	var pending strings.Builder
	pendingKind := -1
	defer func() { out = x.attachLogprobs(out, ds) }()
	for _, d := range ds {
		switch {
		case d.ToolCall != nil:
			if pending.Len() > 0 {
				flushText(pendingKind, pending.String())
				pending.Reset()
			}
			out = append(out, x.toolChunks(d.ToolCall)...)
		case d.Reasoning != "" || d.Content != "":
			kind, text := 2, d.Content
			if d.Reasoning != "" {
				kind, text = 1, d.Reasoning
			}
			if kind != pendingKind && pending.Len() > 0 {
				flushText(pendingKind, pending.String())
				pending.Reset()
			}
			pendingKind = kind
			pending.WriteString(text)
		}
	}
	if pending.Len() > 0 {
		flushText(pendingKind, pending.String())
	}
	return out
}

// toolChunks: the first delta of a call carries index, id, type and name; later ones
// only the index and an arguments fragment (clients concatenate strings).
func (x *exchange) toolChunks(tc *toolCallDelta) []any {
	pos := x.callIndex[tc.Index] // collect ran first, so the call is known
	first := !x.announced[pos]
	x.announced[pos] = true
	var out []any
	pieces := splitText(tc.Arguments, maxEventText)
	if len(pieces) == 0 {
		pieces = []string{""}
	}
	for i, piece := range pieces {
		c := toolCallChunk{Index: pos, Function: functionChunk{Arguments: piece}}
		if first && i == 0 {
			call := x.calls[pos]
			c.ID, c.Type, c.Function.Name = call.ID, "function", call.Function.Name
		} else if piece == "" {
			continue
		}
		out = append(out, x.chatChunk(chunkDelta{ToolCalls: []toolCallChunk{c}}, nil))
	}
	return out
}

func (x *exchange) chatChunk(d chunkDelta, finish *string) chatChunk {
	c := chatChunk{ID: x.id, Object: "chat.completion.chunk", Created: x.created, Model: x.model,
		SystemFingerprint: systemFingerprint,
		Choices:           []chunkChoice{{Index: 0, Delta: d, Logprobs: jsonNull, FinishReason: finish}}}
	if x.p.gen.IncludeUsage {
		c.Usage = jsonNull
	}
	return c
}

func (x *exchange) textChunk(text string, finish *string) textResponse {
	c := textResponse{ID: x.id, Object: "text_completion", Created: x.created, Model: x.model,
		SystemFingerprint: systemFingerprint,
		Choices:           []textChoice{{Text: text, Index: 0, Logprobs: jsonNull, FinishReason: finish}}}
	if x.p.gen.IncludeUsage {
		c.Usage = jsonNull
	}
	return c
}

// splitText cuts s into pieces of at most n bytes at character boundaries.
func splitText(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// logprobsJSON is a choice's logprobs object (null unless the request asked for them).
func (x *exchange) logprobsJSON(entries []tokenLogprob) json.RawMessage {
	if !x.p.gen.Logprobs {
		return jsonNull
	}
	if x.p.chat {
		return x.s.chatLogprobsJSON(entries)
	}
	return x.s.textLogprobsJSON(entries, 0)
}

// attachLogprobs puts the logprobs of ds on the first of the chunks made from them, or on
// a chunk of their own when ds made none (their text is still held back).
func (x *exchange) attachLogprobs(out []any, ds []outDelta) []any {
	var entries []tokenLogprob
	for _, d := range ds {
		entries = append(entries, d.Logprobs...)
	}
	if len(entries) == 0 || !x.p.gen.Logprobs {
		return out
	}
	var raw json.RawMessage
	if x.p.chat {
		raw = x.s.chatLogprobsJSON(entries)
	} else {
		raw = x.s.textLogprobsJSON(entries, x.streamedText)
		x.streamedText += x.s.logprobsText(entries)
	}
	if len(out) == 0 {
		if x.p.chat {
			out = append(out, x.chatChunk(chunkDelta{}, nil))
		} else {
			out = append(out, x.textChunk("", nil))
		}
	}
	switch c := out[0].(type) {
	case chatChunk:
		c.Choices[0].Logprobs = raw
		out[0] = c
	case textResponse:
		c.Choices[0].Logprobs = raw
		out[0] = c
	}
	return out
}
