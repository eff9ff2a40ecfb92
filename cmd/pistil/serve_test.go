package main

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServeCmd runs `pistil serve` on the tiny model on a free loopback port and waits
// until it answers /health; it returns the URL, the signal channel and the result.
func startServeCmd(t *testing.T, extra ...string) (string, chan os.Signal, <-chan error, *syncBuffer) {
	t.Helper()
	dir := tinyModel(t)
	sigs := make(chan os.Signal, 2)
	logs := &syncBuffer{}
	done := make(chan error, 1)
	args := append([]string{"--model", dir, "--port", "0", "--workers", "1", "--ctx", "32768", "--pipeline", os.DevNull}, extra...)
	go func() { done <- serveCmd(args, logs, sigs) }()
	listening := regexp.MustCompile(`pistil serve: listening on (http://127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			if resp, err := http.Get(m[1] + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return m[1], sigs, done, logs
				}
			}
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not become ready:\n%s", logs.String())
	return "", nil, nil, nil
}

// TestServeSecondInterruptExitsAtOnce: the first Ctrl-C drains (new requests get 503
// while a running stream goes on); a second exits at once, with status 130, instead of
// waiting out the 30 s grace.
func TestServeSecondInterruptExitsAtOnce(t *testing.T) {
	url, sigs, done, logs := startServeCmd(t, "--grace", "30s")
	body := `{"model":"tiny","stream":true,"max_tokens":30000,"ignore_eos":true,"temperature":0,"messages":[{"role":"user","content":"go on"}]}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for range 3 { // the role chunk and a few tokens: the engine is busy
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	sigs <- os.Interrupt
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("serve exited on the first interrupt with a stream running: %v", err)
	default:
	}
	if r, err := http.Get(url + "/health"); err == nil {
		r.Body.Close()
		if r.StatusCode != 503 {
			t.Errorf("health while draining: %d, want 503", r.StatusCode)
		}
	}
	start := time.Now()
	sigs <- os.Interrupt
	select {
	case err := <-done:
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != 130 {
			t.Errorf("second interrupt: %v, want exit 130", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("second interrupt took %v to exit", el)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit on the second interrupt")
	}
	if !strings.Contains(logs.String(), "second signal") {
		t.Errorf("log lacks the second signal:\n%s", logs.String())
	}
}

// TestServeTermDrainsAndExits0: one SIGTERM with nothing running exits 0.
func TestServeTermDrainsAndExits0(t *testing.T) {
	_, sigs, done, logs := startServeCmd(t, "--log-json")
	sigs <- syscall.SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit on SIGTERM")
	}
	for _, want := range []string{`"@module":"pistil.load"`, `"@module":"pistil.serve"`, `"@message":"model ready"`, `"@message":"shutting down`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("JSON log lacks %s:\n%s", want, logs.String())
		}
	}
}
