package chat

// The markers the Qwen3/3.5/3.6 family uses in its output. Each is one added token, but
// the parser works on text so that it also handles text decoded from any tokenizer.
const (
	thinkOpen      = "<think>"
	thinkClose     = "</think>"
	toolCallOpen   = "<tool_call>"
	toolCallClose  = "</tool_call>"
	functionOpen   = "<function="
	functionClose  = "</function>"
	parameterOpen  = "<parameter="
	parameterClose = "</parameter>"
)
