package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"pistil/exec"
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
	chunk, workers         int
	passes                 passList
}

type passList []string

func (p *passList) String() string     { return strings.Join(*p, ",") }
func (p *passList) Set(v string) error { *p = append(*p, v); return nil }

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.dir, "model", "", "model directory (config.json, safetensors, tokenizer), or a Hugging Face repo id found in the local cache")
	fs.StringVar(&m.backend, "backend", "cpu", "backend: cpu or cuda (NVIDIA GPU 0, through the driver API and NVRTC)")
	fs.StringVar(&m.pipeline, "pipeline", "", "pipeline.toml to read (default: ./pipeline.toml if present)")
	fs.IntVar(&m.chunk, "chunk", 0, "prefill chunk size (0: pipeline.toml's)")
	fs.IntVar(&m.workers, "workers", 0, "CPU worker goroutines (0: every core)")
	fs.Var(&m.passes, "pass", "pass switch, e.g. fuse-dequant/off (repeatable)")
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
	fs := newFlags("generate")
	var mf modelFlags
	mf.register(fs)
	var sf samplingFlags
	sf.register(fs)
	prompt := fs.String("prompt", "", "prompt text (tokenized with the model's tokenizer)")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids")
	asChat := fs.Bool("chat", false, "wrap --prompt as a user message in the model's chat template")
	noThink := fs.Bool("no-think", false, "with --chat: disable thinking")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate")
	contextSize := fs.Int("context", 0, "session capacity in tokens (0: prompt + max-tokens)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*prompt == "") == (*promptIDs == "") {
		return errors.New("give exactly one of --prompt or --prompt-ids")
	}
	m, err := mf.open(false)
	if err != nil {
		return err
	}
	defer m.Close()

	var tok *tokenizer.Tokenizer
	var ids []int32
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
		text := *prompt
		if *asChat {
			tmpl, err := chat.LoadTemplate(mf.dir)
			if err != nil {
				return err
			}
			think := !*noThink
			// The prompt is a user message: control-token text in it stays text.
			rendered, err := tmpl.RenderPrompt(tok, chat.RenderOptions{
				Messages:            []chat.Message{{Role: "user", Content: text}},
				AddGenerationPrompt: true, EnableThinking: &think,
			}, -1)
			if err != nil {
				return err
			}
			ids = rendered.IDs
		} else {
			// Without --chat the prompt is raw, written whole: "<|im_start|>" in it is the
			// control token (as /v1/completions does by default).
			ids = tok.Encode(text)
		}
	}
	if len(ids) == 0 {
		return errors.New("the prompt is empty")
	}
	capacity := *contextSize
	if capacity == 0 {
		capacity = len(ids) + *maxTokens
	}
	s, err := m.NewSession(capacity)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var stream *tokenizer.StreamDecoder
	if tok != nil {
		stream = tok.NewStreamDecoder()
	}
	stops := make([]int32, 0, len(m.Config().EOSTokenIDs))
	for _, id := range m.Config().EOSTokenIDs {
		stops = append(stops, int32(id))
	}
	printed := false
	res, err := s.Generate(ctx, ids, exec.GenerateOptions{
		MaxTokens: *maxTokens, Sampling: sf.params(), StopTokens: stops,
		OnToken: func(id int32) error {
			printed = true
			if stream != nil {
				fmt.Print(stream.Push(id))
			} else {
				fmt.Printf("%d ", id)
			}
			return nil
		},
	})
	if printed {
		if stream != nil {
			fmt.Print(stream.Flush())
		}
		fmt.Println()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "prompt %d tokens: prefill %.1f tok/s; generated %d tokens: decode %.1f tok/s; finish %s\n",
		res.PromptTokens, res.PrefillTokensPerSec, len(res.Tokens), res.DecodeTokensPerSec, res.FinishReason)
	return nil
}

func parseIDList(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
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
