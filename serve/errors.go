package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error that becomes an OpenAI error object. Every response that is not a
// success carries one, so clients can rely on {"error":{message,type,param,code}}.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string // empty becomes null
	Code    string // empty becomes null
	// RetryAfter, when positive, is sent as Retry-After (seconds) with x-should-retry.
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

// errorBody is the wire shape of an error. Param and Code are pointers so that "absent"
// marshals as null, as the spec requires.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	obj := errorObject{Message: e.Message, Type: e.Type}
	if obj.Type == "" {
		obj.Type = "invalid_request_error"
	}
	if e.Param != "" {
		p := e.Param
		obj.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		obj.Code = &c
	}
	return errorBody{Error: obj}
}

func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

func invalidValue(param, format string, args ...any) *apiError {
	return badRequest(param, "invalid_value", format, args...)
}

func unsupported(param, format string, args ...any) *apiError {
	return badRequest(param, "unsupported_parameter", format, args...)
}

func notFound(code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: code,
		Message: fmt.Sprintf(format, args...)}
}

func unavailable(code string, retryAfter int, msg string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: code,
		Message: msg, RetryAfter: retryAfter}
}

func internalError(msg string) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: msg}
}

// marshalJSON encodes v compactly without HTML escaping, so "<think>" stays readable in
// raw bytes and logs.
func marshalJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only unsupported Go values reach here (a programming error); say so in JSON.
		return []byte(`{"error":{"message":"internal encoding error","type":"server_error","param":null,"code":null}}`)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(marshalJSON(v))
	w.Write([]byte("\n"))
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
		w.Header().Set("x-should-retry", "true")
	}
	writeJSON(w, e.Status, e.body())
}
