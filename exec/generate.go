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
	if dec, plain := s.deviceDecoder(sampler, &o); dec != nil {
		err = s.generateOnDevice(ctx, dec, plain, &o, &res)
		return res, err
	}
	for {
		id := sampler.Sample(s.logits, res.Tokens)
		if done, err := o.accept(&res, id, s.logits); done {
			return res, err
		}
		if len(res.Tokens) == o.MaxTokens || s.n >= s.capacity {
			return res, nil // finish with "length"
		}
		if err := s.Decode(ctx, id); err != nil {
			return res, err
		}
		res.DecodeSteps++
	}
}

// accept records generated token id (sampled from logits, nil when they stayed on the
// device) and says whether generation ends with it: a stop token, or OnToken asking to
// stop (then err is its error, nil for ErrStop).
func (o *GenerateOptions) accept(res *GenerateResult, id int32, logits []float32) (done bool, err error) {
	res.Tokens = append(res.Tokens, id)
	if o.OnLogits != nil {
		o.OnLogits(id, logits)
	}
	stop := slices.Contains(o.StopTokens, id)
	if o.OnToken != nil {
		if err := o.OnToken(id); err != nil {
			if errors.Is(err, ErrStop) {
				res.FinishReason = "stop"
				return true, nil
			}
			return true, err
		}
	}
	if stop {
		res.FinishReason = "stop"
		return true, nil
	}
	return false, nil
}

// deviceDecoder is the decode program's device sampler when this generation can use it:
// the model was opened with TokenHandoff, the backend's decode program samples on its
// device, and nothing needs the logits on the host (a plain Sampler, no OnLogits; a
// constrained sampler masks logits on the host).
func (s *Session) deviceDecoder(sampler TokenSampler, o *GenerateOptions) (DeviceDecoder, *Sampler) {
	plain, ok := sampler.(*Sampler)
	if !s.m.opts.TokenHandoff || o.OnLogits != nil || !ok {
		return nil, nil
	}
	prog, err := s.m.program(1)
	if err != nil {
		return nil, nil // the host path's first Decode reports it
	}
	dec, ok := prog.(DeviceDecoder)
	if !ok {
		return nil, nil
	}
	return dec, plain
}

// generateOnDevice is Generate's loop with the decode steps sampled on the device: the
// first token comes from the prefill's logits on the host, as in the host loop, and
// every later one from a DecodeStream that runs one step ahead (unless HandoffInOrder). Step k+1 (reading token k
// on the device) is submitted before the host waits for token k whenever another token
// may follow token k: the token count and the capacity say so beforehand, and a stop
// found in token k (a stop token, OnToken) or an error discards step k+1, so the session
// ends exactly as the host loop leaves it: Len() counts the prompt and every generated
// token but the last, and Logits() are those the last token was drawn from.
func (s *Session) generateOnDevice(ctx context.Context, dec DeviceDecoder, sampler *Sampler, o *GenerateOptions, res *GenerateResult) error {
	first := sampler.Sample(s.logits, nil)
	if done, err := o.accept(res, first, nil); done {
		return err
	}
	if len(res.Tokens) == o.MaxTokens || s.n >= s.capacity {
		return nil // finish with "length"
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	stream, err := dec.StartDecode(s.st, DeviceSampling{Params: sampler.Params(), Seed: sampler.Seed(), FirstDraw: sampler.Draws()})
	if err != nil {
		return err
	}
	// Step i (from 1) consumes token i-1 at position n0+i-1 and chooses token i.
	n0, submitted := s.n, 0
	allowed := func(i int) bool { return i < o.MaxTokens && n0+i-1 < s.capacity }
	fail := func(err error) error {
		stream.Close()
		pos := s.n
		s.Reset()
		return fmt.Errorf("decode step at position %d: %w (session reset)", pos, err)
	}
	submit := func(token int32) error {
		pos := n0 + submitted
		s.overwrite(pos, pos+1)
		s.decodeSteps.Add(1)
		submitted++
		return stream.Submit(pos, token)
	}
	if err := submit(first); err != nil {
		return fail(err)
	}
	for k := 1; ; k++ {
		ahead := !s.m.opts.HandoffInOrder && allowed(k+1) && ctx.Err() == nil
		if ahead {
			if err := submit(-1); err != nil {
				return fail(err)
			}
		}
		id, err := stream.Token()
		if err != nil {
			return fail(err)
		}
		s.n++
		res.DecodeSteps++
		done, err := o.accept(res, id, nil)
		if !done && ahead {
			continue
		}
		if !done && allowed(k+1) && ctx.Err() == nil {
			// In order: the next step is queued now that token k is read.
			if err := submit(-1); err != nil {
				return fail(err)
			}
			continue
		}
		if done && ahead {
			if derr := stream.Discard(); derr != nil {
				return fail(derr)
			}
		}
		logits, cerr := stream.Close()
		if cerr != nil {
			return fail(cerr)
		}
		s.logits = append(s.logits[:0], logits...)
		sampler.Skip(len(res.Tokens) - 1)
		if !done && allowed(k+1) {
			err = ctx.Err() // cancelled between steps, as the host loop's Decode reports it
		}
		return err
	}
}
