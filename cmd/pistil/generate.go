package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"pistil/exec"
	"pistil/exec/constrain"
	"pistil/models/chat"
	"pistil/models/tokenizer"
	"pistil/pipeline"
)

func init() {
	register(command{name: "generate", summary: "generate text from a prompt (streams tokens, reports tok/s)", run: runGenerate})
}

// samplingFlags are the sampling knobs shared by generate and chat.
type samplingFlags struct {
	temperature, topP, minP, presence, frequency float64
	topK                                         int
	seed                                         int64
}

func (s *samplingFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&s.temperature, "temperature", 0, "sampling temperature (0: greedy)")
	fs.IntVar(&s.topK, "top-k", 0, "keep the K most likely tokens (0: all)")
	fs.Float64Var(&s.topP, "top-p", 0, "nucleus sampling threshold (0: off)")
	fs.Float64Var(&s.minP, "min-p", 0, "drop tokens below min-p times the top probability (0: off)")
	fs.Float64Var(&s.presence, "presence-penalty", 0, "penalty for tokens already generated")
	fs.Float64Var(&s.frequency, "frequency-penalty", 0, "penalty per occurrence of a generated token")
	fs.Int64Var(&s.seed, "seed", -1, "random seed (-1: random)")
}

func (s *samplingFlags) params() exec.SamplingParams {
	p := exec.SamplingParams{Temperature: s.temperature, TopK: s.topK, TopP: s.topP, MinP: s.minP,
		PresencePenalty: s.presence, FrequencyPenalty: s.frequency}
	if s.seed >= 0 {
		seed := s.seed
		p.Seed = &seed
	}
	return p
}

// modelFlags open a model the same way in every command that runs one.
type modelFlags struct {
	dir, backend, pipeline string
	kvCache                string
	chunk, workers         int
	passes                 passList
	log                    logFlags
	// allPieces loads every prefill piece size's plan at Open (pistil serve: no request
	// waits for a plan to compile).
	allPieces bool
	// progress, when set, sees how loading goes (openWith shows it).
	progress func(stage exec.LoadStage, done, total int64)
}

type passList []string

func (p *passList) String() string     { return strings.Join(*p, ",") }
func (p *passList) Set(v string) error { *p = append(*p, v); return nil }

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.dir, "model", "", "model directory (config.json, safetensors, tokenizer), or a Hugging Face repo id found in the local cache")
	fs.StringVar(&m.backend, "backend", "cpu", "backend: cpu, cuda (NVIDIA GPU 0, through the driver API and NVRTC) or metal (the Mac's GPU; not yet run on Apple hardware)")
	fs.StringVar(&m.pipeline, "pipeline", "", "pipeline.toml to read (default: ./pipeline.toml if present)")
	fs.IntVar(&m.chunk, "chunk", 0, "prefill chunk size (0: pipeline.toml's)")
	fs.IntVar(&m.workers, "workers", 0, "CPU worker goroutines (0: every core)")
	fs.StringVar(&m.kvCache, "kv-cache", "", kvCacheUsage)
	fs.Var(&m.passes, "pass", "pass switch, e.g. fuse-dequant/off (repeatable)")
	m.log.register(fs)
}

// resolve turns --model into a folder (a Hugging Face repo id is found in the local
// cache); open calls it, and commands that read the folder before opening call it first.
func (m *modelFlags) resolve() error {
	dir, err := resolveModel(m.dir)
	if err != nil {
		return err
	}
	m.dir = dir
	return nil
}

func (m *modelFlags) open(allLogits bool) (*exec.Model, error) {
	if err := m.resolve(); err != nil {
		return nil, err
	}
	o, err := m.options()
	if err != nil {
		return nil, err
	}
	o.AllLogits = allLogits
	o.AllPieces = m.allPieces
	o.Progress = m.progress
	return exec.Open(m.dir, o)
}

// pipelineFile is --pipeline, else ./pipeline.toml if present, else "" (the built-in
// defaults).
func (m *modelFlags) pipelineFile() string {
	if m.pipeline == "" {
		if _, err := os.Stat("pipeline.toml"); err == nil {
			return "pipeline.toml"
		}
	}
	return m.pipeline
}

// options are the runtime options of pipeline.toml with the flags applied on top: the
// runtime reads no file itself.
func (m *modelFlags) options() (exec.Options, error) {
	pipe, err := pipeline.Load(m.pipelineFile())
	if err != nil {
		return exec.Options{}, err
	}
	if _, err := kvCacheType(pipe, m.kvCache); err != nil {
		return exec.Options{}, err
	}
	o, err := pipe.ExecOptions(m.backend, m.passes)
	if err != nil {
		return exec.Options{}, err
	}
	if m.chunk != 0 {
		o.Chunk = m.chunk
	}
	if m.workers != 0 {
		o.Workers = m.workers
	}
	return o, nil
}

func runGenerate(args []string) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return generateCmd(args, os.Stdin, os.Stdout, os.Stderr, sigs)
}

// generateCmd is generate with its streams and signals given, so tests drive it through
// pipes and send it an interrupt. The first SIGINT or SIGTERM stops the generation: the
// statistics of what was done are printed and the command exits 130 (143 for SIGTERM).
func generateCmd(args []string, stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) error {
	fs := newFlags("generate")
	var mf modelFlags
	mf.register(fs)
	var sf samplingFlags
	sf.register(fs)
	prompt := fs.String("prompt", "", "prompt text (tokenized with the model's tokenizer); - reads it from stdin")
	promptFile := fs.String("prompt-file", "", "read the prompt text from this file")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids; - reads them from stdin")
	asChat := fs.Bool("chat", false, "wrap the prompt as a user message in the model's chat template")
	system := fs.String("system", "", "a system message before the prompt (implies --chat)")
	noThink := fs.Bool("no-think", false, "with --chat: disable thinking")
	special := fs.Bool("special", false, "print special tokens (<|im_end|>, <|endoftext|>) instead of leaving them out")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate (prompt + max-tokens must fit the model's maximum context)")
	jsonSchema := fs.String("json-schema", "", "constrain the output to JSON valid against the JSON Schema in FILE (after </think> when thinking)")
	contextSize := fs.Int("context", 0, "session capacity in tokens (0: prompt + max-tokens)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (quote the prompt: --prompt \"...\")", fs.Args())
	}
	if *system != "" {
		*asChat = true
	}
	given := 0
	for _, v := range []string{*prompt, *promptFile, *promptIDs} {
		if v != "" {
			given++
		}
	}
	if given != 1 {
		return errors.New("give exactly one of --prompt TEXT (- for stdin), --prompt-file FILE or --prompt-ids 1,2,3 (- for stdin)")
	}
	if *asChat && *promptIDs != "" {
		return errors.New("--chat and --system wrap prompt text; they cannot be used with --prompt-ids")
	}
	if err := sf.validate(); err != nil {
		return err
	}
	if *maxTokens <= 0 {
		return fmt.Errorf("--max-tokens %d must be positive", *maxTokens)
	}
	text, err := readPromptText(*prompt, *promptFile, stdin)
	if err != nil {
		return err
	}
	if *promptIDs == "-" {
		data, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read the prompt ids from stdin: %w", err)
		}
		*promptIDs = string(data)
	}
	if err := mf.resolve(); err != nil {
		return err
	}

	var tok *tokenizer.Tokenizer
	var ids []int32
	thinking := false // the prompt leaves the model inside <think>
	if *promptIDs != "" {
		if ids, err = parseIDList(*promptIDs); err != nil {
			return err
		}
		// Decoding output is a convenience here: without a tokenizer, ids are printed.
		tok, _ = tokenizer.Load(mf.dir)
	} else {
		if tok, err = tokenizer.Load(mf.dir); err != nil {
			return fmt.Errorf("--prompt needs the model's tokenizer: %w", err)
		}
		if *asChat {
			tmpl, err := chat.LoadTemplate(mf.dir)
			if err != nil {
				return err
			}
			think := !*noThink
			// The prompt and the system message are messages: control-token text in them
			// stays text.
			var msgs []chat.Message
			if *system != "" {
				msgs = append(msgs, chat.Message{Role: "system", Content: *system})
			}
			rendered, err := tmpl.RenderPrompt(tok, chat.RenderOptions{
				Messages:            append(msgs, chat.Message{Role: "user", Content: text}),
				AddGenerationPrompt: true, EnableThinking: &think,
			}, -1)
			if err != nil {
				return err
			}
			ids = rendered.IDs
			thinking = chat.PromptEndsInReasoning(rendered.Text)
		} else {
			// Without --chat the prompt is raw, written whole: "<|im_start|>" in it is the
			// control token (as /v1/completions does by default).
			ids = tok.Encode(text)
		}
	}
	if len(ids) == 0 {
		return errors.New("the prompt is empty")
	}
	m, err := mf.openLogged(stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	capacity, err := sessionCapacity(m, len(ids), *maxTokens, *contextSize)
	if err != nil {
		return err
	}
	s, err := m.NewSession(capacity)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopSignal os.Signal
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		select {
		case sig := <-sigs:
			stopSignal = sig
			cancel()
		case <-stopWatch:
		}
	}()

	stops := make([]int32, 0, len(m.Config().EOSTokenIDs))
	for _, id := range m.Config().EOSTokenIDs {
		stops = append(stops, int32(id))
	}
	var sampler exec.TokenSampler = exec.NewSampler(sf.params())
	var constrained *constrain.ConstrainedSampler
	if *jsonSchema != "" {
		if constrained, err = schemaSampler(*jsonSchema, tok, stops, sampler, *maxTokens, thinking); err != nil {
			return err
		}
		sampler = constrained
	}
	pre, err := prefill(ctx, s, ids, m.Chunk(), stderr)
	var dec decodeStats
	var res exec.GenerateResult
	printer := newTokenPrinter(tok, *special)
	if err == nil {
		res, err = s.Generate(ctx, nil, exec.GenerateOptions{
			MaxTokens: *maxTokens, Sampler: sampler, StopTokens: stops,
			OnToken: func(id int32) error {
				dec.note(time.Now())
				fmt.Fprint(stdout, printer.push(id))
				return nil
			},
		})
	}
	if dec.tokens > 0 {
		fmt.Fprintln(stdout, printer.flush())
	}
	if err != nil && ctx.Err() != nil && stopSignal != nil {
		// The signal that stopped it is the cause; say what was done and exit as a shell would.
		fmt.Fprintf(stderr, "interrupted (%v): prefilled %d of %d prompt tokens (%.1f tok/s); generated %d tokens (decode %.1f tok/s)\n",
			stopSignal, pre.done, pre.total, pre.tokensPerSec(), dec.tokens, dec.tokensPerSec())
		return &exitError{code: signalExit(stopSignal), err: fmt.Errorf("stopped by %v", stopSignal)}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "prompt %d tokens: prefill %.1f tok/s; generated %d tokens: decode %.1f tok/s; finish %s\n",
		pre.total, pre.tokensPerSec(), len(res.Tokens), dec.tokensPerSec(), res.FinishReason)
	if constrained != nil && !constrained.Matcher().Done() {
		return fmt.Errorf("--max-tokens %d ended the output before its JSON value was complete", *maxTokens)
	}
	return nil
}

// schemaSampler constrains inner to the JSON Schema in file.
func schemaSampler(file string, tok *tokenizer.Tokenizer, stops []int32, inner exec.TokenSampler, maxTokens int, thinking bool) (*constrain.ConstrainedSampler, error) {
	if tok == nil {
		return nil, errors.New("--json-schema needs the model's tokenizer")
	}
	doc, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--json-schema: %w", err)
	}
	g, err := constrain.CompileSchema(doc)
	if err != nil {
		return nil, fmt.Errorf("--json-schema %s: %w", file, err)
	}
	v, err := constrain.NewVocab(tok, tok.VocabSize(), stops)
	if err != nil {
		return nil, fmt.Errorf("--json-schema: %w", err)
	}
	return constrain.NewSampler(inner, g, v, constrain.Options{MaxTokens: maxTokens, Thinking: thinking})
}

// readPromptText reads --prompt (- for stdin) or --prompt-file; both empty is no text.
func readPromptText(prompt, file string, stdin io.Reader) (string, error) {
	switch {
	case prompt == "-":
		data, err := io.ReadAll(stdin)
		if err != nil {
			return "", fmt.Errorf("read the prompt from stdin: %w", err)
		}
		return string(data), nil
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--prompt-file: %w", err)
		}
		return string(data), nil
	}
	return prompt, nil
}

func parseIDList(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--prompt-ids: %q is not a token id", f)
		}
		ids = append(ids, int32(n))
	}
	return ids, nil
}
