package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on request fields that are not the body size. They keep one request from
// making the server do unbounded work before the engine even sees it.
const (
	maxMessages   = 4096
	maxStopWords  = 4
	maxStopBytes  = 1024
	maxTools      = 128
	maxToolName   = 256
	maxTokenLimit = 1 << 24
)

// sampling is the validated sampling part of a request, common to both endpoints.
type sampling struct {
	Temperature      float64
	TopP             float64
	TopK             int
	MinP             float64
	Seed             *int64
	PresencePenalty  float64
	FrequencyPenalty float64
}

// genRequest is what both endpoints agree on after validation.
type genRequest struct {
	Model        string
	MaxTokens    int // 0: up to the remaining context
	Sampling     sampling
	Stop         []string
	Stream       bool
	IncludeUsage bool
	// IgnoreEOS keeps generating past end-of-turn tokens (vLLM and llama.cpp's
	// ignore_eos), for benchmarks and tests that need an exact length.
	IgnoreEOS bool
	// SamplingGiven says which sampling fields the client set; the model's defaults
	// fill the others.
	SamplingGiven samplingGiven
	// Logprobs asks for each token's log probability, with the TopLogprobs most likely
	// alternatives (0..20).
	Logprobs    bool
	TopLogprobs int
}

// chatMessage is one validated message, with content flattened to text.
type chatMessage struct {
	Role             string
	Content          *string // nil: null or absent (only allowed for assistant with tool calls)
	ReasoningContent *string
	ToolCalls        []toolCallIn
	ToolCallID       string
	Name             string
}

// toolCallIn is an assistant tool call in the conversation history.
type toolCallIn struct {
	ID        string
	Name      string
	Arguments string // the JSON text as the client sent it
}

// toolDef is one tool offered to the model, kept as the client's JSON object so the
// template renders it with the client's key order.
type toolDef struct {
	Name string
	Raw  json.RawMessage
}

type chatRequest struct {
	genRequest
	Messages     []chatMessage
	Tools        []toolDef
	ToolsEnabled bool // tools present and tool_choice is not "none"
	// Constraint is the output's grammar: response_format or a forced tool_choice.
	Constraint     *constraint
	EnableThinking *bool
	Preserve       *bool
}

type completionRequest struct {
	genRequest
	Constraint   *constraint
	Prompt       string
	PromptTokens []int32 // set when the prompt was given as token ids
	// ParseSpecial reads control-token text in Prompt as control tokens (default true:
	// the client writes the raw prompt whole, template and all).
	ParseSpecial bool
}

// rawCommon holds the fields both endpoints share. Optional fields are pointers or raw
// JSON so that "absent", null and zero stay distinct (temperature 0 is valid).
type rawCommon struct {
	Model               *string         `json:"model"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *float64        `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	Seed                json.RawMessage `json:"seed"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	IgnoreEOS           *bool           `json:"ignore_eos"`
	Stop                json.RawMessage `json:"stop"`
	Stream              *bool           `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	N                   *float64        `json:"n"`
	LogitBias           json.RawMessage `json:"logit_bias"`
}

type rawChat struct {
	rawCommon
	Messages           json.RawMessage `json:"messages"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Logprobs           *bool           `json:"logprobs"`
	TopLogprobs        json.RawMessage `json:"top_logprobs"`
	ResponseFormat     json.RawMessage `json:"response_format"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	ReasoningEffort    *string         `json:"reasoning_effort"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
}

type rawCompletion struct {
	rawCommon
	Prompt   json.RawMessage `json:"prompt"`
	Echo     *bool           `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *float64        `json:"best_of"`
	Logprobs json.RawMessage `json:"logprobs"`
	// ParseSpecial false tokenizes "<|im_end|>" in the prompt as text (llama-server's name).
	ParseSpecial *bool `json:"parse_special"`
	// ResponseFormat is a common extension (vLLM, llama.cpp) on the legacy endpoint.
	ResponseFormat json.RawMessage `json:"response_format"`
}

// decodeObject parses body as one JSON object into v. Anything else (arrays, scalars,
// truncated JSON, trailing garbage) is a 400 naming the problem.
func decodeObject(body []byte, v any) *apiError {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return badRequest("", "invalid_json", "request body is empty; expected a JSON object")
	}
	if trimmed[0] != '{' {
		return badRequest("", "invalid_json", "request body must be a JSON object")
	}
	if !utf8.Valid(trimmed) {
		return badRequest("", "invalid_json", "request body is not valid UTF-8")
	}
	// json.Unmarshal reads the body in place; a Decoder would copy it into a buffer it
	// grows by doubling (several bodies' worth of garbage for a large request). The Decoder
	// runs only on a syntax error, to word it.
	err := json.Unmarshal(trimmed, v)
	if err == nil {
		return nil
	}
	var syntaxErr *json.SyntaxError
	if !errors.As(err, &syntaxErr) {
		return describeDecodeError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return describeDecodeError(err)
	}
	if dec.More() {
		return badRequest("", "invalid_json", "request body has data after the JSON object")
	}
	return badRequest("", "invalid_json", "invalid JSON in request body: %v", err)
}

// describeDecodeError words a decoding error as a 400 naming the field.
func describeDecodeError(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		// Fields of the embedded rawCommon are reported with its name in front.
		typeErr.Field = strings.TrimPrefix(typeErr.Field, "rawCommon.")
		return badRequest(typeErr.Field, "invalid_type", "%s: expected %s, got JSON %s",
			fieldOrBody(typeErr.Field), jsonTypeName(typeErr.Type.Kind().String()), typeErr.Value)
	}
	return badRequest("", "invalid_json", "invalid JSON in request body: %v", err)
}

func fieldOrBody(f string) string {
	if f == "" {
		return "request body"
	}
	return f
}

func jsonTypeName(kind string) string {
	switch kind {
	case "float64", "float32":
		return "a number"
	case "int", "int64", "int32":
		return "an integer"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "ptr":
		return "a value"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return kind
}

// isNull reports whether a raw field is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// parseCommon validates the shared fields. defaultMax is the endpoint's default for
// max_tokens when the client sends none (0: up to the remaining context).
func parseCommon(rc *rawCommon, defaultMax int) (genRequest, *apiError) {
	var g genRequest
	if rc.Model != nil {
		g.Model = *rc.Model // left out: the loaded model, as llama-server does
	}

	g.MaxTokens = defaultMax
	maxParam, maxRaw := "max_tokens", rc.MaxTokens
	if !isNull(rc.MaxCompletionTokens) {
		// max_completion_tokens is the current name and wins over the deprecated alias.
		maxParam, maxRaw = "max_completion_tokens", rc.MaxCompletionTokens
	}
	if !isNull(maxRaw) {
		n, err := parseInt(maxRaw)
		if err != nil {
			return g, invalidValue(maxParam, "%s must be an integer: %v", maxParam, err)
		}
		if n <= 0 {
			return g, invalidValue(maxParam, "%s must be at least 1, got %d", maxParam, n)
		}
		if n > maxTokenLimit {
			n = maxTokenLimit // clamped to the context later anyway
		}
		g.MaxTokens = int(n)
	}

	s := sampling{Temperature: 1, TopP: 1}
	if v := rc.Temperature; v != nil {
		g.SamplingGiven.Temperature = true
		if !(*v >= 0 && *v <= 2) {
			return g, invalidValue("temperature", "temperature must be between 0 and 2, got %v", *v)
		}
		s.Temperature = *v
	}
	if v := rc.TopP; v != nil {
		g.SamplingGiven.TopP = true
		if !(*v >= 0 && *v <= 1) {
			return g, invalidValue("top_p", "top_p must be between 0 and 1, got %v", *v)
		}
		s.TopP = *v
	}
	if v := rc.TopK; v != nil {
		g.SamplingGiven.TopK = true
		if *v != math.Trunc(*v) || *v < -1 || *v > 1<<30 {
			return g, invalidValue("top_k", "top_k must be an integer >= -1 (-1 or 0: no limit), got %v", *v)
		}
		if *v > 0 {
			s.TopK = int(*v)
		}
	}
	if v := rc.MinP; v != nil {
		g.SamplingGiven.MinP = true
		if !(*v >= 0 && *v <= 1) {
			return g, invalidValue("min_p", "min_p must be between 0 and 1, got %v", *v)
		}
		s.MinP = *v
	}
	if v := rc.PresencePenalty; v != nil {
		if !(*v >= -2 && *v <= 2) {
			return g, invalidValue("presence_penalty", "presence_penalty must be between -2 and 2, got %v", *v)
		}
		s.PresencePenalty = *v
	}
	if v := rc.FrequencyPenalty; v != nil {
		if !(*v >= -2 && *v <= 2) {
			return g, invalidValue("frequency_penalty", "frequency_penalty must be between -2 and 2, got %v", *v)
		}
		s.FrequencyPenalty = *v
	}
	if v := rc.RepetitionPenalty; v != nil && *v != 1 {
		return g, unsupported("repetition_penalty",
			"repetition_penalty is not supported; use presence_penalty or frequency_penalty")
	}
	if !isNull(rc.Seed) {
		n, err := parseInt(rc.Seed)
		if err != nil {
			return g, invalidValue("seed", "seed must be an integer in the int64 range: %v", err)
		}
		s.Seed = &n
	}
	if s.TopP == 0 {
		// The smallest nucleus is the most probable token alone. The engine's sampler
		// reads top_p 0 as "no filter", so say it the way it understands.
		s.TopP, s.TopK = 1, 1
		g.SamplingGiven.TopK = true
	}
	g.Sampling = s

	if v := rc.N; v != nil {
		if *v != math.Trunc(*v) || *v < 1 {
			return g, invalidValue("n", "n must be an integer >= 1, got %v", *v)
		}
		if *v > 1 {
			return g, unsupported("n", "n > 1 is not supported; send separate requests")
		}
	}
	if !isNull(rc.LogitBias) && string(bytes.TrimSpace(rc.LogitBias)) != "{}" {
		return g, unsupported("logit_bias", "logit_bias is not supported yet")
	}

	stop, err := parseStop(rc.Stop)
	if err != nil {
		return g, err
	}
	g.Stop = stop

	if rc.Stream != nil {
		g.Stream = *rc.Stream
	}
	if rc.IgnoreEOS != nil {
		g.IgnoreEOS = *rc.IgnoreEOS
	}
	if !isNull(rc.StreamOptions) {
		if !g.Stream {
			return g, invalidValue("stream_options", "stream_options is only allowed when stream is true")
		}
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if e := decodeObject(rc.StreamOptions, &so); e != nil {
			return g, invalidValue("stream_options", "stream_options must be an object with boolean include_usage")
		}
		g.IncludeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	return g, nil
}

// parseInt reads a JSON number that must be an integer within int64.
func parseInt(raw json.RawMessage) (int64, error) {
	t := strings.TrimSpace(string(raw))
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return n, nil
	}
	// Accept integral floats such as 8.0, which JSON does not distinguish.
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a number", truncate(t, 40))
	}
	if f != math.Trunc(f) || f < -9.223372036854775e18 || f >= 9.223372036854775e18 {
		return 0, fmt.Errorf("%s is not an integer in the int64 range", truncate(t, 40))
	}
	return int64(f), nil
}

func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var list []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidValue("stop", "stop must be a string or an array of strings")
	}
	if len(list) == 0 {
		return nil, invalidValue("stop", "stop must not be an empty array")
	}
	if len(list) > maxStopWords {
		return nil, invalidValue("stop", "stop may hold at most %d strings, got %d", maxStopWords, len(list))
	}
	for i, s := range list {
		if s == "" {
			return nil, invalidValue(fmt.Sprintf("stop[%d]", i), "stop strings must not be empty")
		}
		if len(s) > maxStopBytes {
			return nil, invalidValue(fmt.Sprintf("stop[%d]", i), "stop strings may be at most %d bytes", maxStopBytes)
		}
	}
	return list, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
