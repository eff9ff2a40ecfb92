package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"pistil/exec"
	"pistil/internal/meminfo"
	"pistil/models/tokenizer"
)

// What generate and chat share: sampling flags checked against the server's ranges, the
// session size checked against the model, prefill with progress, and token printing.

// validate applies the ranges the server applies to the same fields (serve/request.go),
// so a value the API refuses is refused here too.
func (s *samplingFlags) validate() error {
	in := func(name string, v, lo, hi float64) error {
		if !(v >= lo && v <= hi) { // NaN fails too
			return fmt.Errorf("--%s %v: must be between %v and %v", name, v, lo, hi)
		}
		return nil
	}
	err := errors.Join(in("temperature", s.temperature, 0, 2), in("top-p", s.topP, 0, 1), in("min-p", s.minP, 0, 1),
		in("presence-penalty", s.presence, -2, 2), in("frequency-penalty", s.frequency, -2, 2))
	if s.topK < -1 || s.topK > 1<<30 {
		err = errors.Join(err, fmt.Errorf("--top-k %d: must be >= -1 (-1 or 0: no limit)", s.topK))
	}
	if s.seed < -1 {
		err = errors.Join(err, fmt.Errorf("--seed %d: must be >= 0, or -1 for a random seed", s.seed))
	}
	return err
}

// applyGenerationConfig takes the sampling settings the model ships in
// generation_config.json for every flag not given (as the server does for requests).
func (s *samplingFlags) applyGenerationConfig(fs *flag.FlagSet, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var gc struct {
		Temperature, TopP, MinP *float64
		TopK                    *int
	}
	if err := json.Unmarshal(data, &struct {
		Temperature **float64 `json:"temperature"`
		TopP        **float64 `json:"top_p"`
		TopK        **int     `json:"top_k"`
		MinP        **float64 `json:"min_p"`
	}{&gc.Temperature, &gc.TopP, &gc.TopK, &gc.MinP}); err != nil {
		return fmt.Errorf("generation_config.json: %w", err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if gc.Temperature != nil && !given["temperature"] {
		s.temperature = *gc.Temperature
	}
	if gc.TopP != nil && !given["top-p"] {
		s.topP = *gc.TopP
	}
	if gc.TopK != nil && !given["top-k"] {
		s.topK = *gc.TopK
	}
	if gc.MinP != nil && !given["min-p"] {
		s.minP = *gc.MinP
	}
	return s.validate()
}

// sessionCapacity checks a prompt and a generation length against the model's maximum
// context and returns the session size to allocate: requested when given, else prompt +
// maxTokens. Nothing here can overflow: every sum is of values already bounded by the
// model's maximum.
func sessionCapacity(m *exec.Model, prompt, maxTokens, requested int) (int, error) {
	maxCtx := m.Config().MaxPositionEmbeddings
	if maxTokens <= 0 {
		return 0, fmt.Errorf("--max-tokens %d must be positive", maxTokens)
	}
	if prompt > maxCtx {
		return 0, fmt.Errorf("the prompt is %d tokens, more than the model's maximum context of %d", prompt, maxCtx)
	}
	if maxTokens > maxCtx-prompt {
		return 0, fmt.Errorf("--max-tokens %d after a %d-token prompt exceeds the model's maximum context of %d tokens (at most %d here)",
			maxTokens, prompt, maxCtx, maxCtx-prompt)
	}
	capacity := prompt + maxTokens
	if requested != 0 {
		if requested < 0 || requested > maxCtx {
			return 0, fmt.Errorf("--context %d: must be between 1 and the model's maximum context %d", requested, maxCtx)
		}
		if requested <= prompt {
			return 0, fmt.Errorf("--context %d leaves no room to generate after a %d-token prompt", requested, prompt)
		}
		capacity = requested
	}
	if err := checkStateFits(m, capacity); err != nil {
		return 0, err
	}
	return capacity, nil
}

// checkStateFits refuses a session whose state would not fit in the memory the machine
// has available (Linux's MemAvailable), instead of letting the allocation kill the
// process; where that figure is unknown it checks nothing.
func checkStateFits(m *exec.Model, capacity int) error {
	need := m.StateBytes(capacity)
	avail, ok := availableMemory()
	if ok && need > avail {
		return fmt.Errorf("a session of %d tokens needs %.2f GB of state, more than the %.2f GB of memory available; "+
			"ask for fewer tokens (--max-tokens, --context)", capacity, float64(need)/1e9, float64(avail)/1e9)
	}
	return nil
}

func availableMemory() (int64, bool) {
	n, err := meminfo.Available()
	return n, err == nil
}

// prefillStats is what a prefill did, complete or interrupted.
type prefillStats struct {
	done, total int
	elapsed     time.Duration
}

func (p prefillStats) tokensPerSec() float64 {
	if p.elapsed <= 0 || p.done == 0 {
		return 0
	}
	return float64(p.done) / p.elapsed.Seconds()
}

// prefill feeds ids to s a chunk at a time (the pieces the session would cut itself), so
// that a long prompt shows its progress on w: a line rewritten in place on a terminal,
// plain lines otherwise, only for prompts longer than two chunks.
func prefill(ctx context.Context, s *exec.Session, ids []int32, chunk int, w io.Writer) (prefillStats, error) {
	st := prefillStats{total: len(ids)}
	start := time.Now()
	show := len(ids) > 2*chunk && w != nil
	p := newProgress(w, "prefill", "tokens")
	lastLine := time.Time{}
	for st.done < len(ids) {
		n := min(chunk, len(ids)-st.done)
		if err := s.Prefill(ctx, ids[st.done:st.done+n], exec.PrefillOptions{}); err != nil {
			st.elapsed = time.Since(start)
			if show {
				p.end()
			}
			return st, err
		}
		st.done += n
		st.elapsed = time.Since(start)
		if show && (p.tty || time.Since(lastLine) >= 2*time.Second || st.done == len(ids)) {
			lastLine = time.Now()
			p.update(int64(st.done), int64(len(ids)), fmt.Sprintf("%.1f tok/s", st.tokensPerSec()))
		}
	}
	if show {
		p.end()
	}
	return st, nil
}

// tokenPrinter turns generated ids into text for the terminal. Special tokens
// (<|im_end|>, <|endoftext|>) are left out unless special is set; without a tokenizer
// the ids themselves are printed.
type tokenPrinter struct {
	tok     *tokenizer.Tokenizer
	stream  *tokenizer.StreamDecoder
	special bool
}

func newTokenPrinter(tok *tokenizer.Tokenizer, special bool) *tokenPrinter {
	p := &tokenPrinter{tok: tok, special: special}
	if tok != nil {
		p.stream = tok.NewStreamDecoder()
	}
	return p
}

// push returns the text that id completes.
func (p *tokenPrinter) push(id int32) string {
	if p.tok == nil {
		return fmt.Sprintf("%d ", id)
	}
	if !p.special && p.tok.IsSpecial(id) {
		return ""
	}
	return p.stream.Push(id)
}

func (p *tokenPrinter) flush() string {
	if p.stream == nil {
		return ""
	}
	return p.stream.Flush()
}

// decodeStats are the decode side of a generation, complete or interrupted.
type decodeStats struct {
	tokens           int
	first, lastToken time.Time
}

func (d *decodeStats) note(now time.Time) {
	if d.tokens == 0 {
		d.first = now
	}
	d.tokens++
	d.lastToken = now
}

// tokensPerSec counts the steps after the first token (which prefill produced).
func (d *decodeStats) tokensPerSec() float64 {
	if d.tokens < 2 {
		return 0
	}
	el := d.lastToken.Sub(d.first).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(d.tokens-1) / el
}

// signalExit is the exit status a shell gives a process killed by sig (128 + its number).
func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// isCancel reports an error caused by a cancelled context.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
