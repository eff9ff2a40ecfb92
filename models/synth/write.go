package synth

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/models/tokenizer"
)

// DefaultMaxShard is the shard limit mlx-lm and Hugging Face use.
const DefaultMaxShard = 5_000_000_000

// chunkBytes is the unit of generation: small enough that a few per worker stay in
// memory, large enough that per-chunk overhead vanishes.
const chunkBytes = 4 << 20

// Options says what to write.
type Options struct {
	// Preset names the dimensions; Dims, when set, replaces them (and Preset is ignored).
	Preset   string
	Dims     *Dims
	Layout   Layout
	Seed     uint64
	Out      string
	MaxShard int64 // bytes per shard; 0 means DefaultMaxShard
	Workers  int   // generator goroutines; 0 means GOMAXPROCS
	// Progress, when set, is called after each chunk with bytes written and the total.
	Progress func(done, total int64)
}

// Result describes what was written.
type Result struct {
	Dims    Dims
	Config  *qwen35moe.Config
	Tensors int
	Bytes   int64
}

// Write writes to opts.Out a synthetic byte-level tokenizer (tokenizer.WriteSynthetic),
// config.json, generation_config.json (stop on the tokenizer's <|im_end|> and
// <|endoftext|>) and a random checkpoint of the exact shapes, streaming: no tensor is
// ever held whole. The dimensions and the layout are checked before anything is written.
func Write(opts Options) (*Result, error) {
	var d Dims
	if opts.Dims != nil {
		d = *opts.Dims
	} else {
		var err error
		if d, err = PresetDims(opts.Preset); err != nil {
			return nil, err
		}
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if _, err := ParseLayout(string(opts.Layout)); err != nil {
		return nil, err
	}
	if err := prepareDir(opts.Out); err != nil {
		return nil, err
	}
	// The byte-level tokenizer goes first: its end-of-turn ids become the model's stop ids.
	if err := tokenizer.WriteSynthetic(opts.Out, d.Vocab); err != nil {
		return nil, fmt.Errorf("synth: --vocab %d: %w", d.Vocab, err)
	}
	tok, err := tokenizer.Load(opts.Out)
	if err != nil {
		return nil, fmt.Errorf("synth: reading back the synthetic tokenizer: %w", err)
	}
	imEnd, ok1 := tok.TokenID("<|im_end|>")
	eot, ok2 := tok.TokenID("<|endoftext|>")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("synth: the synthetic tokenizer lacks <|im_end|> or <|endoftext|>")
	}
	js, cfg, err := configJSON(d, opts.Layout, int(eot))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "config.json"), js, 0o644); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	gen, _ := json.MarshalIndent(map[string]any{"eos_token_id": []int{int(imEnd), int(eot)}, "pad_token_id": eot}, "", "  ")
	if err := os.WriteFile(filepath.Join(opts.Out, "generation_config.json"), append(gen, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if cfg, err = qwen35moe.LoadConfig(opts.Out); err != nil { // what readers will see, generation_config included
		return nil, fmt.Errorf("synth: reading back %s: %w", opts.Out, err)
	}
	plans := plan(cfg, opts.Layout, tok.VocabSize())
	res := &Result{Dims: d, Config: cfg, Tensors: len(plans)}
	if err := writeTensors(opts, plans, res); err != nil {
		return nil, err
	}
	return res, nil
}

// prepareDir creates dir and refuses one that already holds a checkpoint: stale shards of
// an earlier run would otherwise mix with the new ones.
func prepareDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("synth: no output folder given")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if _, err := os.Stat(filepath.Join(dir, safetensors.IndexFile)); err == nil {
		old = append(old, safetensors.IndexFile)
	}
	if len(old) > 0 {
		return fmt.Errorf("synth: %s already holds a checkpoint (%s); use an empty folder", dir, filepath.Base(old[0]))
	}
	return nil
}

type job struct {
	p     *tensorPlan
	chunk int
	off   int64
	n     int
	done  chan []byte
}

// writeTensors generates chunks on worker goroutines and writes them in order.
func writeTensors(opts Options, plans []tensorPlan, res *Result) error {
	specs := make([]safetensors.Spec, len(plans))
	var total int64
	for i, p := range plans {
		specs[i] = p.spec
		total += p.spec.Bytes()
	}
	maxShard := opts.MaxShard
	if maxShard <= 0 {
		maxShard = DefaultMaxShard
	}
	w, err := safetensors.CreateSharded(opts.Out, specs, maxShard, map[string]string{"format": formatTag(opts.Layout)})
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs, ordered, quit := make(chan *job, 2*workers), make(chan *job, 2*workers), make(chan struct{})
	pool := sync.Pool{New: func() any { return make([]byte, chunkBytes) }}
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				buf := pool.Get().([]byte)[:j.n]
				fill(j.p, opts.Seed, j.chunk, j.off, buf)
				j.done <- buf
			}
		}()
	}
	go func() { // dispatch in file order; ordered carries the same order to the writer
		defer close(jobs)
		defer close(ordered)
		for i := range plans {
			p := &plans[i]
			size := p.spec.Bytes()
			for c, off := 0, int64(0); off < size; c, off = c+1, off+chunkBytes {
				j := &job{p: p, chunk: c, off: off, n: int(min(chunkBytes, size-off)), done: make(chan []byte, 1)}
				select {
				case ordered <- j:
				case <-quit:
					return
				}
				select {
				case jobs <- j:
				case <-quit:
					return
				}
			}
		}
	}()
	var werr error
	for j := range ordered {
		if werr != nil {
			continue // after a failure, drain without waiting: j may never reach a worker
		}
		buf := <-j.done
		if werr = w.Write(j.p.spec.Name, buf); werr != nil {
			close(quit)
			continue
		}
		res.Bytes += int64(len(buf))
		if opts.Progress != nil {
			opts.Progress(res.Bytes, total)
		}
		pool.Put(buf[:cap(buf)])
	}
	wg.Wait()
	if cerr := w.Close(); werr == nil && cerr != nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("synth: %w", werr)
	}
	return nil
}

func formatTag(l Layout) string {
	if l.bits() > 0 {
		return "mlx"
	}
	return "pt"
}
