package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// TokenSampler picks the next token from the logits after the last consumed token.
// history is the tokens generated so far in this call. *Sampler implements it; a
// constrained decoder wraps one (masking logits first) without touching the loop.
type TokenSampler interface {
	Sample(logits []float32, history []int32) int32
}

// ErrStop, returned by GenerateOptions.OnToken, ends generation normally with finish
// reason "stop" (a stop string matched).
var ErrStop = errors.New("stop")

// GenerateOptions control one generation.
type GenerateOptions struct {
	MaxTokens int
	// Sampler picks every token; nil means NewSampler(Sampling).
	Sampler  TokenSampler
	Sampling SamplingParams
	// StopTokens end generation with "stop"; the stop token is part of the result.
	StopTokens []int32
	Prefill    PrefillOptions
	// OnLogits, when set, sees the logits each token was sampled from, just before
	// OnToken sees the token (for logprobs). The slice is the session's: valid only
	// during the call. Nothing is copied when it is nil.
	OnLogits func(id int32, logits []float32)
	// OnToken sees each generated token (stop tokens included) as it is chosen. A non-nil
	// error stops generation; ErrStop stops it as a normal "stop".
	OnToken func(id int32) error
}

// GenerateResult describes a finished generation. After an error it holds what was done
// until then.
type GenerateResult struct {
	Tokens       []int32
	FinishReason string // "stop" or "length"
	PromptTokens int
	// DecodeSteps is how many decode steps ran (one per generated token fed back).
	DecodeSteps int
	// Prefill and decode speeds of this call (tokens per second of wall time).
	PrefillTokensPerSec, DecodeTokensPerSec float64
	PrefillTime, DecodeTime                 time.Duration
}

// Generate prefills prompt (which may be empty when the session already holds tokens)
// and samples up to MaxTokens tokens; it is the one generation loop of every caller (the
// CLI, the benchmarks, the verifier and the server). ctx is checked between prefill
// pieces and before every decode step. The last generated token is not fed back, so
// afterwards Len() counts the prompt and all but the last generated token; generation
// also ends with "length" when the session is full.
func (s *Session) Generate(ctx context.Context, prompt []int32, o GenerateOptions) (res GenerateResult, err error) {
	res = GenerateResult{PromptTokens: len(prompt), FinishReason: "length"}
	if s.st == nil {
		return res, errSessionClosed
	}
	if len(prompt) == 0 && s.n == 0 {
		return res, errors.New("empty prompt: nothing to continue from")
	}
	if o.MaxTokens <= 0 {
		return res, fmt.Errorf("max tokens %d must be positive", o.MaxTokens)
	}
	start := time.Now()
	if len(prompt) > 0 {
		if err := s.Prefill(ctx, prompt, o.Prefill); err != nil {
			return res, err
		}
	}
	res.PrefillTime = time.Since(start)
	if len(prompt) > 0 && res.PrefillTime > 0 {
		res.PrefillTokensPerSec = float64(len(prompt)) / res.PrefillTime.Seconds()
	}
	sampler := o.Sampler
	if sampler == nil {
		sampler = NewSampler(o.Sampling)
	}
	start = time.Now()
	defer func() {
		res.DecodeTime = time.Since(start)
		if n := len(res.Tokens) - 1; n > 0 && res.DecodeTime > 0 {
			res.DecodeTokensPerSec = float64(n) / res.DecodeTime.Seconds()
		}
	}()
	for len(res.Tokens) < o.MaxTokens {
		id := sampler.Sample(s.logits, res.Tokens)
		res.Tokens = append(res.Tokens, id)
		if o.OnLogits != nil {
			o.OnLogits(id, s.logits)
		}
		stop := slices.Contains(o.StopTokens, id)
		if o.OnToken != nil {
			if err := o.OnToken(id); err != nil {
				if errors.Is(err, ErrStop) {
					res.FinishReason = "stop"
					return res, nil
				}
				return res, err
			}
		}
		if stop {
			res.FinishReason = "stop"
			return res, nil
		}
		if len(res.Tokens) == o.MaxTokens || s.n >= s.capacity {
			return res, nil // finish with "length"
		}
		if err := s.Decode(ctx, id); err != nil {
			return res, err
		}
		res.DecodeSteps++
	}
	return res, nil
}
