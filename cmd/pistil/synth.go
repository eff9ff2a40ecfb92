package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"pistil/models/synth"
)

func init() {
	register(command{name: "synth", summary: "write a random checkpoint of any dimensions (a preset: tiny, wide, full; changed by flags or a dims file)", run: runSynth})
}

func runSynth(args []string) error {
	fs := newFlags("synth")
	preset := fs.String("preset", "tiny", "base dimensions: "+strings.Join(synth.PresetNames(), ", ")+" (full is the real 35B-A3B); a dims file and the dimension flags change them")
	dimsFile := fs.String("config", "", "dims file applied over the preset: a JSON object of Hugging Face text-config keys (hidden_size, num_experts, ...), or a model's config.json")
	layout := fs.String("layout", "mlx-q4", "checkpoint layout: mlx-q4 (MLX affine 4-bit, 8-bit router gates), mlx-q8 (MLX affine 8-bit) or hf (Hugging Face bf16)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output folder (created; must not already hold a checkpoint)")
	shard := fs.Int64("max-shard-bytes", synth.DefaultMaxShard, "largest shard in bytes")
	dimFlags := map[string]*int{}
	for _, f := range synth.Fields {
		dimFlags[f.Flag] = fs.Int(f.Flag, 0, f.Meaning+" ("+f.Key+"; default: the preset's)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errors.New("--out DIR is required and no positional arguments are taken")
	}
	l, err := synth.ParseLayout(*layout)
	if err != nil {
		return err
	}
	dims, err := synthDims(fs, *preset, *dimsFile, dimFlags)
	if err != nil {
		return err
	}
	start := time.Now()
	lastReport := start
	progress := func(done, total int64) {
		if now := time.Now(); now.Sub(lastReport) >= 2*time.Second || done == total {
			lastReport = now
			rate := float64(done) / now.Sub(start).Seconds() / 1e6
			fmt.Fprintf(os.Stderr, "\r%6.2f / %.2f GB  %4.0f MB/s", float64(done)/1e9, float64(total)/1e9, rate)
		}
	}
	res, err := synth.Write(synth.Options{Dims: &dims, Layout: l, Seed: *seed, Out: *out, MaxShard: *shard, Progress: progress})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("wrote %s: layout %s, %d tensors, %.3f GB in %.1fs (%.0f MB/s)\ndims (from preset %s): %s\n",
		*out, l, res.Tensors, float64(res.Bytes)/1e9, el.Seconds(), float64(res.Bytes)/el.Seconds()/1e6, *preset, res.Dims)
	return nil
}

// synthDims resolves the dimensions: the preset, then the dims file, then the flags given
// on the command line (a flag given as 0 is an error, not "keep the preset's").
func synthDims(fs *flag.FlagSet, preset, file string, flags map[string]*int) (synth.Dims, error) {
	d, err := synth.PresetDims(preset)
	if err != nil {
		return d, err
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return d, fmt.Errorf("--config: %w", err)
		}
		if err := synth.ReadDims(data, &d); err != nil {
			return d, fmt.Errorf("--config %s: %w", file, err)
		}
	}
	fs.Visit(func(f *flag.Flag) {
		for _, field := range synth.Fields {
			if field.Flag == f.Name {
				*field.Of(&d) = *flags[f.Name]
			}
		}
	})
	return d, d.Validate()
}
