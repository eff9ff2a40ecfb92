package serve

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"pistil/models/chat"
)

// Request preparation (parsing, rendering, tokenizing) runs on the handler goroutine,
// before the engine queue, so --queue does not bound it. Three things do:
//   - the body limit, by default what the context can use (defaultMaxBody);
//   - tokenizing stops as soon as the prompt passes the context, so a huge prompt costs
//     what the context costs, not what the body holds;
//   - at most prepSlots requests prepare at once (the rest wait their turn, or leave).
// The process also gets a Go memory limit from the machine's size (memlimit.go).

// bytesPerContextToken is the body a context token may take by default: several times
// what any text needs (English ~4 bytes a token, CJK escaped by ensure_ascii ~8, JSON
// escapes of code a little more), so a prompt that fits the context always fits the body,
// and a body of junk costs little more than a full context.
const bytesPerContextToken = 32

// bodyOverhead is the body allowed beyond the prompt itself (field names, tool schemas
// the template shows compactly, sampling fields).
const bodyOverhead = 1 << 20

// defaultMaxBody is the body limit for a context of capacity tokens.
func defaultMaxBody(capacity int) int64 {
	return int64(capacity)*bytesPerContextToken + bodyOverhead
}

// maxBody is the body limit in force: the configured one, else the context's; before the
// model is loaded (every request is then refused anyway) the overhead alone.
func (s *Server) maxBody() int64 {
	if s.cfg.MaxBody > 0 {
		return s.cfg.MaxBody
	}
	if n := s.bodyLimit.Load(); n > 0 {
		return n
	}
	return bodyOverhead
}

// prepSlots is how many requests may prepare at once: one per core, since preparing is
// CPU work; more only adds memory.
func prepSlots() int { return max(1, runtime.GOMAXPROCS(0)) }

// prepare reads the body and turns it into engine input with build, which runs holding
// one of the prepSlots preparation slots (waiting for one when all are taken). ok false:
// the error is answered, or the client left while waiting (counted as 499).
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, build func(body []byte) (*prepared, *apiError)) (p *prepared, ok bool) {
	body, e := s.readBody(w, r)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	select {
	case s.prep <- struct{}{}:
	case <-r.Context().Done():
		noteStatus(w, statusClientClosed)
		return nil, false
	}
	func() {
		defer func() { <-s.prep }() // also when build panics (the middleware recovers it)
		p, e = build(body)
	}()
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	return p, true
}

// readAllSized reads r whole into one buffer of the declared length (already checked
// against the limit) instead of one grown by doubling, which for a large body is twice
// the garbage.
func readAllSized(r io.Reader, declared int64) ([]byte, error) {
	if declared <= 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, declared+1) // +1: reading to EOF needs no further growth
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // longer than declared: grow, MaxBytesReader still bounds it
		}
	}
}

// bodyReadError says why a body could not be read, in words that name no socket address
// (the net error's text has both ends of the connection).
func bodyReadError(err error, limit int64, timeout time.Duration) *apiError {
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(limit)
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return badRequest("", "invalid_body", "the request body did not arrive within %s: the client stopped sending", timeout)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return badRequest("", "invalid_body", "the request body ended before its declared length")
	}
	return badRequest("", "invalid_body", "the request body could not be read (the connection failed)")
}

// renderChat renders and tokenizes a conversation for the engine: control tokens only
// where the template writes them (chat.RenderPrompt), and no more tokenizing than the
// context can hold. param names the request field for the context error.
func (s *Server) renderChat(opts chat.RenderOptions, param string) (chat.Prompt, *apiError) {
	capacity := s.runner.sess.Capacity()
	p, err := s.tmpl.RenderPrompt(s.tok, opts, capacity-1)
	if err != nil {
		return p, invalidValue(param, "the conversation cannot be rendered with the chat template: %v", err)
	}
	if !p.Complete {
		return p, contextExceeded(param, capacity, 0, false)
	}
	return p, nil
}

// encodeRaw tokenizes a prompt the client wrote whole (/v1/completions, /tokenize):
// parseSpecial on, the default, reads "<|im_start|>" as the control token, as llama-server
// and vLLM do for a raw prompt; off, as text. limit < 0: no limit.
func (s *Server) encodeRaw(text string, parseSpecial bool, limit int) ([]int32, bool) {
	if parseSpecial {
		return s.tok.AppendEncode(nil, text, limit)
	}
	return s.tok.AppendText(nil, text, limit)
}

// contextExceeded is the 400 agent frameworks match on ("maximum context length is N
// tokens"). counted says whether the prompt was tokenized whole (n tokens) or tokenizing
// stopped at the context, so that all that is known is that it has more than capacity-1.
func contextExceeded(param string, capacity, n int, counted bool) *apiError {
	count := fmt.Sprintf("%d", n)
	if !counted {
		count = fmt.Sprintf("more than %d", capacity-1)
	}
	return badRequest(param, "context_length_exceeded",
		"This model's maximum context length is %d tokens. However, your %s resulted in %s tokens. Please reduce the length of the %s.",
		capacity, param, count, param)
}
