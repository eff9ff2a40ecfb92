package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pistil/exec"
	"pistil/pipeline"
	"pistil/serve"
)

func init() {
	register(command{name: "serve", summary: "serve the model over an OpenAI-compatible HTTP API", run: runServe})
}

// listFlag collects comma-separated or repeated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func runServe(args []string) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return serveCmd(args, os.Stderr, sigs)
}

// serveCmd is serve with its log stream and signals given (tests send them). The first
// SIGINT or SIGTERM drains: new requests get 503, running ones have --grace to finish. A
// second one exits at once.
func serveCmd(args []string, stderr io.Writer, sigs <-chan os.Signal) error {
	fs := newFlags("serve")
	var mf modelFlags
	mf.register(fs)
	var cfg serve.Config
	var allowed, cors, aliases listFlag
	fs.StringVar(&cfg.Host, "host", "127.0.0.1", "address to listen on (loopback by default)")
	fs.IntVar(&cfg.Port, "port", 8080, "port to listen on (0: any free port)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "require this key as 'Authorization: Bearer KEY' (default: none)")
	fs.IntVar(&cfg.Queue, "queue", 16, "requests that may wait for the engine before new ones get 503")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", 0, "prefix cache budget in bytes (0: derived from the state sizes and free memory, printed at start-up; negative: off)")
	fs.Int64Var(&cfg.CacheHostBytes, "cache-host-bytes", 0, "on a GPU backend, host memory in bytes the prefix cache spills to past --cache-bytes (0: as much as the device part, at most a quarter of the machine's memory; negative: no spilling)")
	fs.IntVar(&cfg.SnapshotEvery, "snapshot-every", 512, "prefix cache snapshot interval in prompt tokens")
	fs.IntVar(&cfg.Context, "ctx", 0, "context capacity in tokens (0: min(model max, 32768))")
	fs.Var(&allowed, "allowed-hosts", "Host header names to accept besides localhost and IP literals (comma-separated, * for any)")
	fs.Var(&cors, "cors", "browser origins allowed to call the API (comma-separated, * for any; default none)")
	fs.Int64Var(&cfg.MaxBody, "max-body", 0, "largest request body in bytes (0: 32 per context token + 1 MiB)")
	fs.StringVar(&cfg.ModelName, "name", "", "served model id (default: the model directory's name)")
	fs.Var(&aliases, "alias", "further model ids to accept (comma-separated)")
	grace := fs.Duration("grace", 30*time.Second, "on SIGTERM, how long running requests may finish before they are cancelled")
	thinking := fs.String("thinking", "", "on|off: whether requests that say nothing about thinking think (default: the chat template's, on)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.AllowedHosts, cfg.CORSOrigins, cfg.Aliases = allowed, cors, aliases
	if err := applyServerTable(fs, mf.pipeline, &cfg, grace, thinking); err != nil {
		return err
	}
	if *thinking != "" {
		on, err := parseOnOff(*thinking)
		if err != nil {
			return fmt.Errorf("--thinking: %w", err)
		}
		cfg.Thinking = &on
	}
	if err := mf.resolve(); err != nil {
		return err
	}
	cfg.ModelDir = mf.dir
	root, err := mf.log.logger(stderr)
	if err != nil {
		return err
	}
	logger := root.Named("serve")
	cfg.Logger = logger

	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ip := net.ParseIP(cfg.Host); (ip == nil && cfg.Host != "localhost") || (ip != nil && !ip.IsLoopback()) {
		if cfg.APIKey == "" {
			logger.Warn("listening on a non-loopback address without --api-key: anyone who can reach it can use the model", "host", cfg.Host)
		}
	}
	srv := serve.New(cfg)
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	// This exact line is what scripts wait for (serve/conformance/run.sh).
	fmt.Fprintf(stderr, "pistil serve: listening on http://%s\n", ln.Addr())

	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	// A server loads every prefill piece's plan before it is ready: a cached turn's few
	// hundred new tokens are several pieces, and compiling them inside the first such
	// request made it the slowest turn of the agent test on the H200 (0.42 s of prefill
	// against 0.29-0.36 s for the turns after it).
	mf.allPieces = true
	loadErr := make(chan error, 1)
	go func() {
		loadErr <- srv.Load(func() (*exec.Model, error) { return mf.openWith(root.Named("load"), stderr) })
	}()

	for {
		select {
		case err := <-loadErr:
			if err != nil {
				httpSrv.Close()
				return fmt.Errorf("loading the model: %w", err)
			}
			loadErr = nil
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case sig := <-sigs:
			logger.Info("shutting down: new requests get 503; running ones may finish (send the signal again to exit at once)",
				"signal", sig.String(), "grace", grace.String())
			done := make(chan error, 1)
			go func() { done <- drain(srv, httpSrv, *grace) }()
			select {
			case err := <-done:
				return err
			case sig := <-sigs:
				logger.Warn("second signal: exiting without waiting for running requests", "signal", sig.String())
				httpSrv.Close()
				return &exitError{code: signalExit(sig), err: fmt.Errorf("stopped by a second %v", sig)}
			}
		}
	}
}

// drain refuses new work and drains the engine first (running requests have grace to
// finish, then they are cancelled), then closes the listener and waits for the handlers
// to write their last bytes.
func drain(srv *serve.Server, httpSrv *http.Server, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shutErr := srv.Shutdown(ctx)
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	if err := httpSrv.Shutdown(closeCtx); err != nil {
		httpSrv.Close()
	}
	if shutErr != nil {
		return fmt.Errorf("closing the model: %w", shutErr)
	}
	return nil
}

// serverTable is pipeline.toml's [server] table. Every key is optional; a flag given on
// the command line wins over the file.
type serverTable struct {
	Host          *string  `toml:"host"`
	Port          *int     `toml:"port"`
	APIKey        *string  `toml:"api_key"`
	Queue         *int     `toml:"queue"`
	CacheBytes    *int64   `toml:"cache_bytes"`
	CacheHost     *int64   `toml:"cache_host_bytes"`
	SnapshotEvery *int     `toml:"snapshot_every"`
	Ctx           *int     `toml:"ctx"`
	AllowedHosts  []string `toml:"allowed_hosts"`
	CORS          []string `toml:"cors"`
	MaxBody       *int64   `toml:"max_body"`
	Name          *string  `toml:"name"`
	Grace         *string  `toml:"grace"`
	Thinking      *string  `toml:"thinking"`
}

var serverTableKeys = map[string]string{
	"host": "host", "port": "port", "api_key": "api-key", "queue": "queue", "cache_bytes": "cache-bytes",
	"snapshot_every": "snapshot-every", "ctx": "ctx", "allowed_hosts": "allowed-hosts", "cors": "cors",
	"max_body": "max-body", "name": "name", "grace": "grace", "thinking": "thinking", "cache_host_bytes": "cache-host-bytes",
}

// parseOnOff reads the value of an on|off setting.
func parseOnOff(v string) (bool, error) {
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("want on or off, got %q", v)
}

// applyServerTable reads [server] from the pipeline file (--pipeline, else ./pipeline.toml
// when present) into cfg for every setting whose flag was not given.
func applyServerTable(fs interface{ Visit(func(*flag.Flag)) }, path string, cfg *serve.Config, grace *time.Duration, thinking *string) error {
	if path == "" {
		if _, err := os.Stat("pipeline.toml"); err != nil {
			return nil
		}
		path = "pipeline.toml"
	}
	p, err := pipeline.Load(path)
	if err != nil {
		return err
	}
	var raw map[string]any
	if err := p.DecodeServer(&raw); err != nil {
		return err
	}
	for k := range raw {
		if _, ok := serverTableKeys[k]; !ok {
			return fmt.Errorf("%s: unknown key %q in [server]", path, k)
		}
	}
	var t serverTable
	if err := p.DecodeServer(&t); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	use := func(key string, present bool) bool { return present && !given[serverTableKeys[key]] }
	if use("host", t.Host != nil) {
		cfg.Host = *t.Host
	}
	if use("port", t.Port != nil) {
		cfg.Port = *t.Port
	}
	if use("api_key", t.APIKey != nil) {
		cfg.APIKey = *t.APIKey
	}
	if use("queue", t.Queue != nil) {
		cfg.Queue = *t.Queue
	}
	if use("cache_bytes", t.CacheBytes != nil) {
		cfg.CacheBytes = *t.CacheBytes
	}
	if use("cache_host_bytes", t.CacheHost != nil) {
		cfg.CacheHostBytes = *t.CacheHost
	}
	if use("snapshot_every", t.SnapshotEvery != nil) {
		cfg.SnapshotEvery = *t.SnapshotEvery
	}
	if use("ctx", t.Ctx != nil) {
		cfg.Context = *t.Ctx
	}
	if use("allowed_hosts", t.AllowedHosts != nil) {
		cfg.AllowedHosts = t.AllowedHosts
	}
	if use("cors", t.CORS != nil) {
		cfg.CORSOrigins = t.CORS
	}
	if use("max_body", t.MaxBody != nil) {
		cfg.MaxBody = *t.MaxBody
	}
	if use("name", t.Name != nil) {
		cfg.ModelName = *t.Name
	}
	if use("grace", t.Grace != nil) {
		d, err := time.ParseDuration(*t.Grace)
		if err != nil {
			return fmt.Errorf("%s: [server] grace: %w", path, err)
		}
		*grace = d
	}
	if use("thinking", t.Thinking != nil) {
		if _, err := parseOnOff(*t.Thinking); err != nil {
			return fmt.Errorf("%s: [server] thinking: %w", path, err)
		}
		*thinking = *t.Thinking
	}
	return nil
}
