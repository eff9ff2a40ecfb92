package serve

import "encoding/json"

// Response shapes of the OpenAI Chat Completions and Completions APIs. Pointers and
// omitempty are chosen field by field: the spec requires some keys to be present as null
// (finish_reason, logprobs), and others to be absent when unset (tool-call id and name on
// later deltas). Index fields never carry omitempty, or index 0 would vanish.

type usage struct {
	PromptTokens            int                `json:"prompt_tokens"`
	CompletionTokens        int                `json:"completion_tokens"`
	TotalTokens             int                `json:"total_tokens"`
	PromptTokensDetails     promptDetails      `json:"prompt_tokens_details"`
	CompletionTokensDetails *completionDetails `json:"completion_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type completionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// timings reports the engine's speeds for one request, with llama.cpp's field names.
type timings struct {
	CacheN             int     `json:"cache_n"`
	PromptN            int     `json:"prompt_n"`
	PromptMS           float64 `json:"prompt_ms"`
	PromptPerSecond    float64 `json:"prompt_per_second"`
	PredictedN         int     `json:"predicted_n"`
	PredictedMS        float64 `json:"predicted_ms"`
	PredictedPerSecond float64 `json:"predicted_per_second"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Timings           *timings     `json:"timings,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role             string  `json:"role"`
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
	// Reasoning repeats ReasoningContent under the name newer servers and clients use
	// (the OpenAI Agents SDK reads only this one).
	Reasoning *string        `json:"reasoning,omitempty"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type toolCallJSON struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionJSON `json:"function"`
}

type functionJSON struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	// Usage is absent unless the client asked for it; then null on every chunk but the
	// last (json.RawMessage "null" marshals as null, a nil interface is omitted).
	Usage   any      `json:"usage,omitempty"`
	Timings *timings `json:"timings,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        chunkDelta      `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chunkDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        *string         `json:"reasoning,omitempty"` // = ReasoningContent
	ToolCalls        []toolCallChunk `json:"tool_calls,omitempty"`
}

type toolCallChunk struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionChunk `json:"function"`
}

type functionChunk struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type textResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []textChoice `json:"choices"`
	Usage             any          `json:"usage,omitempty"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Timings           *timings     `json:"timings,omitempty"`
}

type textChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

var jsonNull = json.RawMessage("null")

const systemFingerprint = "fp_pistil"
