package main

import (
	"flag"
	"fmt"
	"io"

	"time"

	"github.com/hashicorp/go-hclog"

	"pistil/exec"
	"pistil/models/safetensors"
)

// logFlags choose how the CLI and the server log: through hclog, with named sub-loggers
// per component (pistil.load, pistil.serve, pistil.serve.http, pistil.serve.engine ...).
type logFlags struct {
	level string
	json  bool
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: trace, debug, info, warn, error or off")
	fs.BoolVar(&l.json, "log-json", false, "log JSON objects, one a line, instead of text")
}

// logger returns the root logger "pistil" writing to w.
func (l *logFlags) logger(w io.Writer) (hclog.Logger, error) {
	level := hclog.LevelFromString(l.level)
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: want trace, debug, info, warn, error or off", l.level)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name: "pistil", Level: level, JSONFormat: l.json, Output: w,
		TimeFormat: "2006-01-02T15:04:05.000Z0700", DisableTime: false,
	}), nil
}

// openLogged opens the model like open, logging what it loads and how long it took to
// the pistil.load logger.
func (m *modelFlags) openLogged(stderr io.Writer) (*exec.Model, error) {
	root, err := m.log.logger(stderr)
	if err != nil {
		return nil, err
	}
	return m.openWith(root.Named("load"), stderr)
}

func (m *modelFlags) openWith(log hclog.Logger, stderr io.Writer) (*exec.Model, error) {
	if err := m.resolve(); err != nil {
		return nil, err
	}
	log.Info("opening the model", "dir", m.dir, "backend", m.backend)
	start := time.Now()
	bar := newProgress(stderr, "loading weights", "bytes")
	reread := newProgress(stderr, "reading into 2 MiB pages", "bytes")
	var lastShown time.Time
	var weightBytes int64
	m.progress = func(stage exec.LoadStage, done, total int64) {
		switch stage {
		case exec.LoadWeights:
			weightBytes = total
			// A bar on a terminal; plain lines every few seconds otherwise (and the last).
			if bar.tty && time.Since(lastShown) >= 100*time.Millisecond || time.Since(lastShown) >= 3*time.Second || done == total {
				lastShown = time.Now()
				bar.update(done, total, "")
			}
		case exec.LoadPageCache:
			if done == 0 {
				log.Info("reading a checkpoint file again so the page cache holds it in 2 MiB pages (once)", "gb", fmt.Sprintf("%.2f", float64(total)/1e9))
			}
			if reread.tty && time.Since(lastShown) >= 100*time.Millisecond || time.Since(lastShown) >= 3*time.Second || done == total {
				lastShown = time.Now()
				reread.update(done, total, "")
			}
			if done == total {
				reread.end()
			}
		case exec.LoadPlans:
			bar.end()
			log.Debug("plan loaded", "plans", done, "of", total, "elapsed", time.Since(start).Round(time.Millisecond).String())
		}
	}
	model, err := m.open(false)
	bar.end()
	if err != nil {
		log.Error("the model did not load", "dir", m.dir, "error", err)
		return nil, err
	}
	logPageCache(log, model)
	cfg := model.Config()
	log.Info("model ready", "model", model.Name(), "layers", len(cfg.Layers), "max_context", cfg.MaxPositionEmbeddings,
		"prefill_chunk", model.Chunk(), "plans", fmt.Sprint(model.LoadedPlans()), "weights_gb", fmt.Sprintf("%.3f", float64(weightBytes)/1e9), "elapsed", time.Since(start).Round(time.Millisecond).String())
	return model, nil
}

// logPageCache logs what opening the model found of its checkpoint in the page cache and
// did (exec.Model.PageCache): each file read again into 2 MiB pages at info, the rest at
// debug, the total at info, and a failure as a warning (the model runs either way).
func logPageCache(log hclog.Logger, model *exec.Model) {
	reports, err := model.PageCache()
	if err != nil {
		log.Warn("could not settle the checkpoint in 2 MiB pages; it runs from the page cache as it is", "error", err)
	}
	if len(reports) == 0 {
		return
	}
	gb := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/1e9) }
	for _, r := range reports {
		args := []any{"file", r.Path, "gb", gb(r.Bytes), "huge_before_gb", gb(r.Before), "huge_after_gb", gb(r.After), "elapsed", r.Took.Round(time.Millisecond).String()}
		switch {
		case r.Reread:
			log.Info("read a checkpoint file again so the page cache holds it in 2 MiB pages", args...)
		case r.Skipped != "":
			log.Debug("left a checkpoint file's pages as they were", append(args, "why", r.Skipped)...)
		default:
			log.Debug("checkpoint file already in 2 MiB pages", args...)
		}
	}
	t := summarizePageCache(reports)
	log.Info("checkpoint in 2 MiB pages", "huge_gb", gb(t.HugeBytes), "of_gb", gb(t.Bytes), "left_to_read_gb", gb(t.UncachedBytes))
}

// pageCacheSummary is exec.Model.PageCache summed over the checkpoint's files: what the
// load log says and `pistil bench` reports (its JSON's page_cache).
type pageCacheSummary struct {
	// HugeBytes is the bytes mapped in 2 MiB pages after Open, Bytes the checkpoint's size.
	HugeBytes int64 `json:"huge_bytes"`
	Bytes     int64 `json:"bytes"`
	// UncachedBytes is the size of the files not in the page cache at Open, left to come
	// in as they are read (neither mapped in nor counted in HugeBytes).
	UncachedBytes int64 `json:"uncached_bytes"`
	// FilesReread counts the files read again, RereadSecs the time spent on them.
	FilesReread int     `json:"files_reread"`
	RereadSecs  float64 `json:"reread_secs"`
}

func summarizePageCache(reports []safetensors.PageCacheReport) pageCacheSummary {
	var t pageCacheSummary
	for _, r := range reports {
		t.HugeBytes += r.After
		t.Bytes += r.Bytes
		if r.LeftToRead {
			t.UncachedBytes += r.Bytes
		}
		if r.Reread {
			t.FilesReread++
			t.RereadSecs += r.Took.Seconds()
		}
	}
	return t
}
