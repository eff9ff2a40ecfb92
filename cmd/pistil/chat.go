package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"pistil/exec"
	"pistil/models/chat"
	"pistil/models/tokenizer"
)

func init() {
	register(command{name: "chat", summary: "chat with the model in the terminal (multi-turn, streamed, reads a pipe too)", run: runChat})
}

const chatHelp = `commands: /reset (forget the conversation, keep the system message), /system TEXT (set the
system message and start over), /exit (or Ctrl-D). Ctrl-C stops the answer being written.`

func runChat(args []string) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return chatCmd(args, os.Stdin, os.Stdout, os.Stderr, sigs)
}

// chatCmd is chat with its streams and signals given, so tests drive it through pipes.
// SIGINT stops the answer being written (the program goes on); SIGTERM ends the program.
func chatCmd(args []string, stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) error {
	fs := newFlags("chat")
	var mf modelFlags
	mf.register(fs)
	var sf samplingFlags
	sf.register(fs)
	system := fs.String("system", "", "system message")
	noThink := fs.Bool("no-think", false, "disable thinking (the template's enable_thinking=false)")
	maxTokens := fs.Int("max-tokens", 2048, "most tokens per answer")
	contextSize := fs.Int("context", 0, "session capacity in tokens, the whole conversation (0: min(model maximum, 32768))")
	special := fs.Bool("special", false, "print special tokens in answers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (type your messages after it starts, or pipe them in)", fs.Args())
	}
	if err := sf.validate(); err != nil {
		return err
	}
	if err := mf.resolve(); err != nil {
		return err
	}
	if err := sf.applyGenerationConfig(fs, mf.dir); err != nil {
		return err
	}
	tok, err := tokenizer.Load(mf.dir)
	if err != nil {
		return fmt.Errorf("chat needs the model's tokenizer: %w", err)
	}
	tmpl, err := chat.LoadTemplate(mf.dir)
	if err != nil {
		return err
	}
	m, err := mf.openLogged(stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	capacity := *contextSize
	if capacity == 0 {
		capacity = min(m.Config().MaxPositionEmbeddings, 32768)
	}
	if _, err := sessionCapacity(m, 0, min(*maxTokens, capacity), capacity); err != nil {
		return err
	}
	c, err := newChatSession(m, tok, tmpl, capacity)
	if err != nil {
		return err
	}
	c.think, c.system, c.maxTokens, c.sampling, c.special = !*noThink, *system, *maxTokens, sf.params(), *special
	c.out, c.info = stdout, stderr
	c.tty = isTerminal(stdout)
	return c.loop(stdin, sigs)
}

// chatSession is a conversation on one engine session. Between turns it keeps the
// session's state and a snapshot taken at the last turn's assistant header: the next
// turn's prompt starts with everything up to that header (the template renders history
// the same way every time), so only what follows it is prefilled again. When the whole
// previous answer is rendered back exactly as generated, the live state is reused instead.
type chatSession struct {
	m    *exec.Model
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
	s    *exec.Session

	think, special bool
	system         string
	maxTokens      int
	sampling       exec.SamplingParams
	stops          []int32
	imStart        int32 // -1: the vocabulary has no <|im_start|>

	messages []chat.Message
	consumed []int32 // the tokens the session holds (len == s.Len())
	snap     *exec.Snapshot
	snapIDs  []int32 // the tokens the snapshot holds
	noReuse  bool    // tests: prefill every turn from scratch

	out, info io.Writer
	tty       bool
}

func newChatSession(m *exec.Model, tok *tokenizer.Tokenizer, tmpl *chat.Template, capacity int) (*chatSession, error) {
	s, err := m.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	c := &chatSession{m: m, tok: tok, tmpl: tmpl, s: s, think: true, maxTokens: 2048, imStart: -1, out: io.Discard, info: io.Discard}
	for _, id := range m.Config().EOSTokenIDs {
		c.stops = append(c.stops, int32(id))
	}
	if id, ok := tok.TokenID("<|im_end|>"); ok && !slices.Contains(c.stops, id) {
		c.stops = append(c.stops, id)
	}
	if id, ok := tok.TokenID("<|im_start|>"); ok {
		c.imStart = id
	}
	return c, nil
}

// turnResult is what one turn did.
type turnResult struct {
	promptTokens, cached int
	tokens               []int32
	reasoning, content   string
	prefill              prefillStats
	decode               decodeStats
	finish               string
	interrupted          bool
}

// loop reads lines until /exit or the end of input. Each line is a message or a command.
func (c *chatSession) loop(stdin io.Reader, sigs <-chan os.Signal) error {
	var mu sync.Mutex
	var cancelAnswer context.CancelFunc // non-nil while an answer is being written
	terminated := make(chan os.Signal, 1)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		for {
			select {
			case sig := <-sigs:
				mu.Lock()
				cancel := cancelAnswer
				mu.Unlock()
				if sig != os.Interrupt {
					terminated <- sig
					if cancel != nil {
						cancel()
					}
					return
				}
				if cancel != nil {
					cancel()
				} else {
					fmt.Fprintln(c.info, "\n(Ctrl-C stops an answer; /exit or Ctrl-D quits)")
				}
			case <-stopWatch:
				return
			}
		}
	}()
	if c.tty {
		fmt.Fprintln(c.info, chatHelp)
	}
	// Lines are read on their own goroutine so that a SIGTERM while waiting for input
	// ends the program at once.
	type inputLine struct {
		text string
		eof  bool
		err  error
	}
	lines := make(chan inputLine)
	go func() {
		in := bufio.NewReader(stdin)
		for {
			text, err := in.ReadString('\n')
			l := inputLine{text: strings.TrimRight(text, "\r\n"), eof: err != nil}
			if err != nil && !errors.Is(err, io.EOF) {
				l.err = err
			}
			select {
			case lines <- l:
			case <-stopWatch:
				return
			}
			if l.eof {
				return
			}
		}
	}()
	for {
		if c.tty {
			fmt.Fprint(c.out, "> ")
		}
		var l inputLine
		select {
		case sig := <-terminated:
			return &exitError{code: signalExit(sig), err: fmt.Errorf("stopped by %v", sig)}
		case l = <-lines:
		}
		if l.err != nil {
			return fmt.Errorf("read input: %w", l.err)
		}
		line := l.text
		if strings.TrimSpace(line) != "" {
			quit, cmdErr := c.command(line)
			if quit {
				return nil
			}
			if cmdErr != nil {
				fmt.Fprintf(c.info, "%v\n", cmdErr)
			} else if !strings.HasPrefix(line, "/") {
				ctx, cancel := context.WithCancel(context.Background())
				mu.Lock()
				cancelAnswer = cancel
				mu.Unlock()
				res, err := c.turn(ctx, line)
				mu.Lock()
				cancelAnswer = nil
				mu.Unlock()
				cancel()
				select {
				case sig := <-terminated:
					return &exitError{code: signalExit(sig), err: fmt.Errorf("stopped by %v", sig)}
				default:
				}
				if err != nil {
					return err
				}
				c.report(res)
			}
		}
		if l.eof {
			return nil
		}
	}
}

// command runs a /command; a line that is not one returns (false, nil).
func (c *chatSession) command(line string) (quit bool, err error) {
	if !strings.HasPrefix(line, "/") {
		return false, nil
	}
	name, arg, _ := strings.Cut(line, " ")
	switch name {
	case "/exit", "/quit", "/bye":
		return true, nil
	case "/reset", "/clear":
		c.reset()
		fmt.Fprintln(c.info, "conversation reset")
	case "/system":
		c.system = strings.TrimSpace(arg)
		c.reset()
		if c.system == "" {
			fmt.Fprintln(c.info, "system message removed; conversation reset")
		} else {
			fmt.Fprintln(c.info, "system message set; conversation reset")
		}
	case "/help", "/?":
		fmt.Fprintln(c.info, chatHelp)
	default:
		return false, fmt.Errorf("unknown command %s; %s", name, chatHelp)
	}
	return false, nil
}

func (c *chatSession) reset() {
	c.messages = nil
	c.snap, c.snapIDs = nil, nil
}

// turn answers one user message, streaming the answer to c.out.
func (c *chatSession) turn(ctx context.Context, user string) (turnResult, error) {
	var res turnResult
	msgs := slices.Clone(c.messages)
	if c.system != "" {
		msgs = append([]chat.Message{{Role: "system", Content: c.system}}, msgs...)
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: user})
	// Control tokens come only from the template: "<|im_end|>" typed in a message (or
	// produced in an answer that is rendered back) stays text.
	rendered, err := c.tmpl.RenderPrompt(c.tok, chat.RenderOptions{Messages: msgs, AddGenerationPrompt: true, EnableThinking: &c.think}, -1)
	if err != nil {
		return res, err
	}
	text, ids := rendered.Text, rendered.IDs
	res.promptTokens = len(ids)
	room := c.s.Capacity() - len(ids)
	if room <= 0 {
		fmt.Fprintf(c.info, "the conversation (%d tokens) no longer fits the session's %d tokens: /reset to start over, or restart with a larger --context\n",
			len(ids), c.s.Capacity())
		return res, nil
	}
	res.cached = c.reuse(ids)

	// Prefill up to the assistant header, snapshot there for the next turn, then the rest.
	fed := slices.Clone(ids[:res.cached])
	header := res.cached
	if i := lastIndex(ids, c.imStart); i > res.cached {
		header = i
	}
	start := time.Now()
	for _, part := range [][]int32{ids[res.cached:header], ids[header:]} {
		if len(part) == 0 {
			continue
		}
		st, err := prefill(ctx, c.s, part, c.m.Chunk(), c.info)
		fed = append(fed, part[:st.done]...)
		res.prefill.done += st.done
		if err != nil {
			res.prefill.elapsed = time.Since(start)
			return c.interrupted(ctx, user, res, fed, err)
		}
		if c.s.Len() == header && header > res.cached {
			if snap, err := c.s.Snapshot(); err == nil {
				c.snap, c.snapIDs = snap, slices.Clone(ids[:header])
			}
		}
	}
	res.prefill.total = len(ids) - res.cached
	res.prefill.elapsed = time.Since(start)

	parser := chat.NewParser(chat.ParserOptions{StartInReasoning: chat.PromptEndsInReasoning(text)})
	printer := newTokenPrinter(c.tok, c.special)
	view := newAnswerView(c.out, c.tty)
	gen, err := c.s.Generate(ctx, nil, exec.GenerateOptions{
		MaxTokens: min(c.maxTokens, room), Sampling: c.sampling, StopTokens: c.stops,
		OnToken: func(id int32) error {
			res.decode.note(time.Now())
			res.tokens = append(res.tokens, id)
			if slices.Contains(c.stops, id) && !c.special {
				return nil
			}
			view.show(parser.Push(printer.push(id)))
			return nil
		},
	})
	view.show(parser.Push(printer.flush()))
	view.show(parser.Finish())
	view.end()
	res.reasoning, res.content = view.reasoning.String(), view.content.String()
	fed = append(fed, res.tokens...)
	if err != nil {
		return c.interrupted(ctx, user, res, fed, err)
	}
	res.finish = gen.FinishReason
	c.commit(user, res, fed)
	return res, nil
}

// reuse brings the session to the longest prefix of ids it can restore and returns its
// length: the live state when it holds a prefix of ids, else the last snapshot when it
// does, else nothing.
func (c *chatSession) reuse(ids []int32) int {
	if c.noReuse {
		c.s.Reset()
		c.consumed = nil
		return 0
	}
	// At least one token must be prefilled, for the logits the first answer token needs.
	if n := len(c.consumed); n > 0 && n < len(ids) && slices.Equal(c.consumed, ids[:n]) {
		return n
	}
	if n := len(c.snapIDs); c.snap != nil && n < len(ids) && slices.Equal(c.snapIDs, ids[:n]) {
		if err := c.s.Restore(c.snap); err == nil {
			c.consumed = slices.Clone(c.snapIDs)
			return n
		}
	}
	c.s.Reset()
	c.consumed = nil
	return 0
}

// commit records a finished turn: the message pair, and the tokens the session now holds
// (the last generated token is not fed back).
func (c *chatSession) commit(user string, res turnResult, fed []int32) {
	c.messages = append(c.messages, chat.Message{Role: "user", Content: user})
	msg := chat.Message{Role: "assistant", Content: res.content}
	if res.reasoning != "" {
		r := res.reasoning
		msg.ReasoningContent = &r
	}
	c.messages = append(c.messages, msg)
	c.consumed = fed[:c.s.Len()]
}

// interrupted ends a turn that stopped early: a cancelled context (Ctrl-C) keeps what
// was answered so far in the conversation; any other error ends the program.
func (c *chatSession) interrupted(ctx context.Context, user string, res turnResult, fed []int32, err error) (turnResult, error) {
	// The session holds a prefix of what was fed, or nothing if a step was cut short.
	c.consumed = fed[:c.s.Len()]
	if ctx.Err() == nil || !isCancel(err) {
		return res, err
	}
	res.interrupted = true
	if len(res.tokens) > 0 {
		c.commit(user, res, fed)
	}
	return res, nil
}

// report prints a turn's statistics on the info stream.
func (c *chatSession) report(r turnResult) {
	if r.promptTokens == 0 {
		return
	}
	what := r.finish
	if r.interrupted {
		what = "interrupted by Ctrl-C"
	}
	fmt.Fprintf(c.info, "[%d prompt tokens, %d cached, %d prefilled (%.1f tok/s); %d generated (%.1f tok/s); %s]\n",
		r.promptTokens, r.cached, r.prefill.done, r.prefill.tokensPerSec(), len(r.tokens), r.decode.tokensPerSec(), what)
}

func lastIndex(ids []int32, id int32) int {
	for i := len(ids) - 1; i >= 0; i-- {
		if ids[i] == id {
			return i
		}
	}
	return -1
}

// answerView prints parsed output: reasoning set apart from the answer (dim on a
// terminal, between [thinking] and [/thinking] lines otherwise), then the answer.
type answerView struct {
	w                  io.Writer
	tty                bool
	inReasoning        bool
	reasoning, content strings.Builder
}

func newAnswerView(w io.Writer, tty bool) *answerView { return &answerView{w: w, tty: tty} }

func (v *answerView) show(ds []chat.Delta) {
	for _, d := range ds {
		switch {
		case d.Reasoning != "":
			if !v.inReasoning && v.reasoning.Len() == 0 {
				if v.tty {
					fmt.Fprint(v.w, "\033[2m")
				} else {
					fmt.Fprintln(v.w, "[thinking]")
				}
				v.inReasoning = true
			}
			v.reasoning.WriteString(d.Reasoning)
			fmt.Fprint(v.w, d.Reasoning)
		case d.Content != "":
			v.closeReasoning()
			v.content.WriteString(d.Content)
			fmt.Fprint(v.w, d.Content)
		case d.ToolCall != nil:
			v.closeReasoning()
			fmt.Fprint(v.w, d.ToolCall.Name, d.ToolCall.Arguments)
		}
	}
}

func (v *answerView) closeReasoning() {
	if !v.inReasoning {
		return
	}
	v.inReasoning = false
	if v.tty {
		fmt.Fprint(v.w, "\033[0m\n\n")
	} else {
		fmt.Fprintln(v.w, "\n[/thinking]")
	}
}

func (v *answerView) end() {
	v.closeReasoning()
	fmt.Fprintln(v.w)
}
