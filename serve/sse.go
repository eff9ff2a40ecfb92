package serve

import (
	"fmt"
	"net/http"
	"time"
)

// sseWriter frames server-sent events the way every OpenAI SDK parses them: "data: " plus
// one line of compact JSON plus a blank line, comments as ":" lines, and "data: [DONE]"
// before the body ends. Each event is one Write followed by a Flush, so a client that
// decodes per network chunk sees whole events.
//
// Every write runs under a deadline: a client that stops reading cannot hold the engine
// (the write fails, the caller cancels the request).
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	started      bool
	failed       error
}

func newSSEWriter(w http.ResponseWriter, writeTimeout time.Duration) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout}
}

// start sends the 200 and the event-stream headers.
func (s *sseWriter) start() error {
	if s.started {
		return s.failed
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	return s.flushRaw(nil)
}

// event sends one data event holding v as JSON.
func (s *sseWriter) event(v any) error {
	payload := marshalJSON(v)
	buf := make([]byte, 0, len(payload)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	return s.flushRaw(buf)
}

// ping sends an SSE comment, which every SDK ignores, to keep idle-timeouts away while
// the request is queued or prefilling.
func (s *sseWriter) ping() error { return s.flushRaw([]byte(": ping\n\n")) }

// done sends the terminator; the handler returns right after so the body ends.
func (s *sseWriter) done() error { return s.flushRaw([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) flushRaw(b []byte) error {
	if s.failed != nil {
		return s.failed
	}
	if s.writeTimeout > 0 {
		// Not every ResponseWriter supports deadlines (httptest recorders); then the
		// write simply has none.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	}
	if len(b) > 0 {
		if _, err := s.w.Write(b); err != nil {
			s.failed = fmt.Errorf("writing event: %w", err)
			return s.failed
		}
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = fmt.Errorf("flushing event: %w", err)
		return s.failed
	}
	return nil
}
