// Package serve is pistil's OpenAI-compatible HTTP server: chat and text completions
// (streamed over SSE or not), models, health and Prometheus metrics, in front of one
// engine session that runs one request at a time from a bounded queue, with a prefix
// cache of state snapshots so the next turn of a conversation only prefills what is new.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"pistil/exec"
	"pistil/models/chat"
	"pistil/models/tokenizer"
)

// Config is the server's settings. Zero values take the defaults noted.
type Config struct {
	// ModelDir holds config.json, the weights, tokenizer.json and the chat template.
	ModelDir string
	// ModelName replaces the served model id (default: the model's own name).
	ModelName string
	// Aliases are further names the model field may use.
	Aliases []string
	// Host and Port are where the CLI listens (the server itself only checks Host headers
	// against Host).
	Host string
	Port int
	// APIKey, when set, is required as "Authorization: Bearer KEY" (or X-Api-Key) on every
	// route but /health.
	APIKey string
	// Queue is how many requests may wait for the engine (default 16).
	Queue int
	// CacheBytes is the prefix cache's budget (default: derived from the model's state
	// sizes and the backend's free memory, see defaultCacheBudget; negative disables it).
	// On a GPU backend it is device memory.
	CacheBytes int64
	// CacheHostBytes is, on a GPU backend, the host memory the prefix cache spills to
	// past CacheBytes (default: as much as the device part, at most a quarter of the
	// machine's memory; negative: no spilling). Unused where state is host memory.
	CacheHostBytes int64
	// SnapshotEvery is the prefill snapshot interval in tokens (default 512).
	SnapshotEvery int
	// Context is the session capacity in tokens (default min(model max, 32768)).
	Context int
	// AllowedHosts are Host header names accepted besides localhost and IP literals
	// ("*" accepts any).
	AllowedHosts []string
	// CORSOrigins are browser origins allowed to call the API ("*" allows any). None by
	// default: no CORS headers are sent and foreign origins get 403.
	CORSOrigins []string
	// MaxBody is the largest request body in bytes (default: 32 bytes per context token
	// plus 1 MiB, what a prompt that fits the context can need; see request_prepare.go).
	MaxBody int64
	// MemoryLimit is the Go memory limit in bytes (default: what the loaded process holds
	// plus half of the machine's remaining memory; negative: leave it; see memlimit.go).
	MemoryLimit int64
	// PingInterval is the SSE keep-alive interval while a stream is silent (default 15s).
	PingInterval time.Duration
	// WriteTimeout bounds each write to a client (default 60s): a client that stops
	// reading has its request cancelled. It also bounds reading the request body, so a
	// client that stops sending gets a 400.
	WriteTimeout time.Duration
	// Thinking, when set, is whether a chat or responses request that says nothing about
	// thinking (no reasoning_effort, reasoning.effort or enable_thinking) thinks; nil
	// leaves it to the chat template (Qwen3.6: on).
	Thinking *bool
	// Logger receives the server's logs (default hclog.Default()); the server logs on
	// its sub-loggers "http" (one access line per request) and "engine" (every engine
	// error).
	Logger hclog.Logger
}

func (c *Config) setDefaults() {
	if c.Queue <= 0 {
		c.Queue = 16
	}
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = 512
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 15 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = hclog.Default()
	}
}

// Server serves one model. Create it with New, start loading with Load (the HTTP routes
// answer 503 until the model is ready), and stop it with Shutdown.
type Server struct {
	cfg     Config
	metrics *metrics
	created int64
	// httpLog gets the access log, engineLog the engine's errors.
	httpLog, engineLog hclog.Logger

	// Set once by Load, before ready becomes true.
	model      *exec.Model
	name       string // the served model id
	tok        *tokenizer.Tokenizer
	tmpl       *chat.Template
	runner     *runner
	sched      *scheduler
	stopTokens map[int32]bool
	thinkClose int32 // id of "</think>" (-1 if the vocabulary has none)
	imStart    int32 // id of "<|im_start|>" (-1 if none)
	// samplingDefaults fill the sampling fields a request leaves out.
	samplingDefaults samplingDefaults
	structured       structuredState

	ready    atomic.Bool
	loadErr  atomic.Pointer[string]
	shutdown atomic.Bool
	// base is cancelled when shutdown's grace period ends: every running request stops.
	base       context.Context
	cancelBase context.CancelFunc
	loadOnce   sync.Once

	// prep holds a token per request being parsed, rendered or tokenized (prepSlots).
	prep chan struct{}
	// bodyLimit is the default body limit, set by Load from the context.
	bodyLimit atomic.Int64
	// responseStore keeps Responses API conversations for previous_response_id.
	responseStore responseStore

	// onFinish, when set (tests), sees every finished generation.
	onFinish func(genTrace)
}

// genTrace is what a test can observe about one generation.
type genTrace struct {
	Prompt []int32
	Result genResult
	Err    error
}

// New returns a server that is not ready yet.
func New(cfg Config) *Server {
	cfg.setDefaults()
	base, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, metrics: &metrics{}, created: time.Now().Unix(), base: base, cancelBase: cancel, thinkClose: -1, imStart: -1,
		prep:    make(chan struct{}, prepSlots()),
		httpLog: cfg.Logger.Named("http"), engineLog: cfg.Logger.Named("engine")}
}

// Load reads the tokenizer and chat template from cfg.ModelDir, opens the model with
// open, and makes the server ready. It may run in a goroutine while the server already
// answers /health with 503. The server owns the model from then on: Shutdown closes it.
func (s *Server) Load(open func() (*exec.Model, error)) error {
	err := errors.New("Load called twice")
	s.loadOnce.Do(func() { err = s.load(open) })
	if err != nil {
		msg := err.Error()
		s.loadErr.Store(&msg)
	}
	return err
}

func (s *Server) load(open func() (*exec.Model, error)) error {
	tok, err := tokenizer.Load(s.cfg.ModelDir)
	if err != nil {
		return fmt.Errorf("load tokenizer: %w", err)
	}
	tmpl, err := chat.LoadTemplate(s.cfg.ModelDir)
	if err != nil {
		return fmt.Errorf("load chat template: %w", err)
	}
	defaults, err := loadSamplingDefaults(s.cfg.ModelDir)
	if err != nil {
		return err
	}
	model, err := open()
	if err != nil {
		return err
	}
	ctxLen := s.cfg.Context
	maxContext := model.Config().MaxPositionEmbeddings
	if ctxLen <= 0 {
		ctxLen = min(maxContext, 32768)
	}
	if max := maxContext; max > 0 && ctxLen > max {
		ctxLen = max
	}
	sess, err := model.NewSession(ctxLen)
	if err != nil {
		model.Close()
		return fmt.Errorf("allocate a session of %d tokens: %w", ctxLen, err)
	}
	s.model, s.tok, s.tmpl, s.samplingDefaults = model, tok, tmpl, defaults
	s.name = s.cfg.ModelName
	if s.name == "" {
		s.name = model.Name()
	}
	s.stopTokens = map[int32]bool{}
	for _, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		if id, ok := tok.TokenID(name); ok {
			s.stopTokens[id] = true
		}
	}
	if id, ok := tok.TokenID("</think>"); ok {
		s.thinkClose = id
	}
	if id, ok := tok.TokenID("<|im_start|>"); ok {
		s.imStart = id
	}
	budget, why := s.cfg.CacheBytes, "set by --cache-bytes"
	if budget == 0 {
		budget, why = defaultCacheBudget(model, ctxLen)
	}
	cache := newSpillingPrefixCache(0, budget) // state is host memory: nothing in device memory
	if model.StateInDeviceMemory() {
		host, hostWhy := s.cfg.CacheHostBytes, "set by --cache-host-bytes"
		switch {
		case budget <= 0:
			host, hostWhy = 0, "the cache is off"
		case host == 0:
			host = budget
			hostWhy = "as much as the device part"
			if m := machineMemory(); m > 0 && m/4 < host {
				host, hostWhy = m/4, fmt.Sprintf("a quarter of the machine's memory (%d bytes)", m)
			}
		case host < 0:
			host, hostWhy = 0, "spilling off (--cache-host-bytes negative)"
		}
		cache = newSpillingPrefixCache(budget, host)
		s.cfg.Logger.Info("prefix cache", "device_budget_bytes", budget, "device_budget", why,
			"host_budget_bytes", host, "host_budget", hostWhy,
			"snapshot_bytes", model.FixedStateBytes(), "kv_bytes_per_token", model.KVBytesPerToken())
	} else {
		s.cfg.Logger.Info("prefix cache", "budget_bytes", budget, "budget", why,
			"snapshot_bytes", model.FixedStateBytes(), "kv_bytes_per_token", model.KVBytesPerToken())
	}
	s.runner = &runner{sess: sess, cache: cache,
		snapshotEvery: s.cfg.SnapshotEvery, metrics: s.metrics}
	s.sched = newScheduler(s.cfg.Queue)
	s.bodyLimit.Store(defaultMaxBody(ctxLen))
	memLimit := s.applyMemoryLimit()
	s.ready.Store(true)
	s.cfg.Logger.Info("model ready", "model", s.name, "context", ctxLen, "max_body", s.maxBody(), "memory_limit", memLimit)
	return nil
}

// cacheSnapshotsPerConversation is how many snapshots (message boundaries) per cached
// conversation the default budget has room for besides its KV rows.
const cacheSnapshotsPerConversation = 8

// defaultCacheBudget sizes the prefix cache for two agents' conversations at the full
// session context (their KV rows and cacheSnapshotsPerConversation snapshots each), but
// at most half the memory the backend has left once the session is allocated.
func defaultCacheBudget(m *exec.Model, capacity int) (int64, string) {
	snapshot := m.FixedStateBytes() + 4*int64(m.Config().VocabSize)
	conversation := m.KVBytesPerToken()*int64(capacity) + cacheSnapshotsPerConversation*snapshot
	budget := 2 * conversation
	why := fmt.Sprintf("2 conversations of %d tokens with %d snapshots each", capacity, cacheSnapshotsPerConversation)
	if free, ok := m.FreeMemory(); ok && free/2 < budget {
		budget = free / 2
		why = fmt.Sprintf("half of the backend's free memory (%d bytes)", free)
	}
	return budget, why
}

// Shutdown stops taking requests (503 shutting_down), answers queued ones with 503,
// lets the running one finish until ctx ends, then cancels it. It does not close
// listeners: call http.Server.Shutdown after it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	if !s.ready.Load() {
		return nil
	}
	s.sched.close()
	select {
	case <-s.sched.idle():
	case <-ctx.Done():
		s.cancelBase()
		<-s.sched.idle()
	}
	// Nothing runs any more: release the cached snapshots, the session and the model
	// (device memory included).
	s.runner.cache.clear()
	return errors.Join(s.runner.sess.Close(), s.model.Close())
}

// Handler is the HTTP handler with every route and middleware.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"/v1", ""} {
		mux.Handle(prefix+"/chat/completions", s.post("chat.completions", s.handleChat))
		mux.Handle(prefix+"/completions", s.post("completions", s.handleCompletions))
		mux.Handle(prefix+"/responses", s.post("responses", s.handleResponses))
		mux.Handle(prefix+"/models", s.get("models", s.handleModels))
		mux.Handle(prefix+"/models/{id...}", s.get("models", s.handleModel))
	}
	mux.Handle("/tokenize", s.post("tokenize", s.handleTokenize))
	mux.Handle("/detokenize", s.post("detokenize", s.handleDetokenize))
	mux.Handle("/health", s.get("health", s.handleHealth))
	mux.Handle("/metrics", s.get("metrics", s.handleMetrics))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("not_found", "no route for %s %s", r.Method, truncate(r.URL.Path, 200)))
	})
	return s.middleware(mux)
}

// post and get wrap a handler with its method check and request counting.
func (s *Server) post(name string, h http.HandlerFunc) http.Handler { return s.route(name, "POST", h) }
func (s *Server) get(name string, h http.HandlerFunc) http.Handler  { return s.route(name, "GET", h) }

func (s *Server) route(name, method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			s.metrics.countRequest(name, rec.statusOrOK())
			s.logAccess(name, r, rec, start)
		}()
		if r.Method != method && !(method == "GET" && r.Method == "HEAD") {
			rec.Header().Set("Allow", method)
			writeError(rec, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
				Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, method)})
			return
		}
		h(rec, r)
	})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if msg := s.loadErr.Load(); msg != nil {
		writeError(w, unavailable("model_load_failed", 0, "model failed to load: "+*msg))
		return
	}
	if !s.ready.Load() {
		writeError(w, unavailable("model_loading", 5, "Loading model"))
		return
	}
	if s.shutdown.Load() {
		writeError(w, errShuttingDown())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var depth int
	var running bool
	var cs cacheStats
	if s.ready.Load() {
		depth, running = s.sched.depth()
		cs = s.runner.cache.stats()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(w, depth, running, cs, s.ready.Load())
	if err := writeProcessMetrics(w); err != nil {
		s.cfg.Logger.Warn("process metrics", "error", err)
	}
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// The context a request may fill, under the names clients look for: context_length
	// (OpenRouter, opencode), max_model_len (vLLM), meta.n_ctx_train (llama-server: the
	// trained length, which may exceed what this server allocated).
	ContextLength int       `json:"context_length"`
	MaxModelLen   int       `json:"max_model_len"`
	Meta          modelMeta `json:"meta"`
}

type modelMeta struct {
	NCtxTrain int `json:"n_ctx_train"`
	NVocab    int `json:"n_vocab"`
}

func (s *Server) modelObject(id string) modelObject {
	capacity := s.runner.sess.Capacity()
	return modelObject{ID: id, Object: "model", Created: s.created, OwnedBy: "pistil",
		ContextLength: capacity, MaxModelLen: capacity,
		Meta: modelMeta{NCtxTrain: s.model.Config().MaxPositionEmbeddings, NVocab: s.tok.VocabSize()}}
}

// modelObjects lists the served model under its name and then each alias, so a client
// that picks from the list finds every name the model field accepts.
func (s *Server) modelObjects() []modelObject {
	list := []modelObject{s.modelObject(s.name)}
	for _, a := range s.cfg.Aliases {
		if a != "" && a != s.name {
			list = append(list, s.modelObject(a))
		}
	}
	return list
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if e := s.checkReady(); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": s.modelObjects()})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if e := s.checkReady(); e != nil {
		writeError(w, e)
		return
	}
	id := r.PathValue("id")
	if id == "" || !s.knownModel(id) {
		writeError(w, unknownModel(id))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject(id))
}

// knownModel matches a requested name against the served names only: the name is never
// used for anything else (no path, no lookup).
func (s *Server) knownModel(name string) bool {
	if name == "" || name == s.name { // "": left out, the loaded model
		return true
	}
	for _, a := range s.cfg.Aliases {
		if name == a {
			return true
		}
	}
	return false
}

func unknownModel(name string) *apiError {
	return notFound("model_not_found", "The model %q does not exist.", truncate(name, 100))
}

func (s *Server) checkReady() *apiError {
	if s.loadErr.Load() != nil {
		return unavailable("model_load_failed", 0, "the model failed to load; see the server log")
	}
	if !s.ready.Load() {
		return unavailable("model_loading", 5, "Loading model")
	}
	if s.shutdown.Load() {
		return errShuttingDown()
	}
	return nil
}

// newID returns prefix + 24 random base64url characters (144 bits).
func newID(prefix string) string {
	var b [18]byte
	rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// statusRecorder remembers the status a handler sent, for metrics and logs.
type statusRecorder struct {
	http.ResponseWriter
	status int
	// clientGone: the client left before its response ended (a stream it abandoned after
	// the 200): counted as 499, as the log says.
	clientGone bool
	access     accessRecord
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// statusClientClosed is nginx's 499: the client went away before its response.
const statusClientClosed = 499

// noteStatus records a status for metrics without sending anything (the client is gone).
func noteStatus(w http.ResponseWriter, code int) {
	if r, ok := w.(*statusRecorder); ok {
		if r.status == 0 {
			r.status = code
		}
		r.clientGone = r.clientGone || code == statusClientClosed
	}
}

func (r *statusRecorder) statusOrOK() int {
	if r.clientGone {
		return statusClientClosed
	}
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
