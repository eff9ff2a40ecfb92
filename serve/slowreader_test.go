package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"pistil/exec"
)

// smallBufferListener shrinks each accepted connection's send buffer, so that a client
// that stops reading blocks the server's writes after a few kilobytes instead of the
// megabytes loopback buffers would otherwise absorb.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// F4: a client that stops reading does not hold the engine: the per-write deadline fires,
// the request is cancelled and the lane is free for others.
func TestSlowReaderIsCancelled(t *testing.T) {
	cfg := testConfig()
	cfg.WriteTimeout = 300 * time.Millisecond
	s := New(cfg)
	ts := &testServer{Server: s}
	s.onFinish = func(g genTrace) {
		ts.mu.Lock()
		ts.traces = append(ts.traces, g)
		ts.mu.Unlock()
	}
	if err := s.Load(func() (*exec.Model, error) { return tiny.model, nil }); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(s.Handler())
	hs.Listener = smallBufferListener{hs.Listener}
	hs.Start()
	defer hs.Close()
	defer func() { s.sched.close(); <-s.sched.idle() }()
	ts.URL, ts.client = hs.URL, hs.Client()

	// A raw connection with a tiny receive buffer that never reads the response.
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		return serr
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(chatBody("talk a lot", map[string]any{"max_tokens": 1500, "ignore_eos": true, "stream": true}))
	req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	waitTraces(t, ts, 1)
	g := ts.lastTrace(t)
	if !errors.Is(g.Err, context.Canceled) || len(g.Result.Tokens) >= 1500 {
		t.Fatalf("the stuck stream was not cancelled: %v after %d tokens", g.Err, len(g.Result.Tokens))
	}
	if g.Result.StepsAfterCancel > 1 {
		t.Fatalf("%d decode steps after the write deadline", g.Result.StepsAfterCancel)
	}
	waitIdle(t, ts)
	ts.chat(t, chatBody("others are served", map[string]any{"max_tokens": 2}))
}
