package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"pistil/models/synth"
)

func init() {
	register(command{name: "synth", summary: "write a random checkpoint of a preset's exact shapes (tiny, wide, full)", run: runSynth})
}

func runSynth(args []string) error {
	fs := newFlags("synth")
	preset := fs.String("preset", "tiny", "model dimensions: "+strings.Join(synth.PresetNames(), ", ")+" (full is the real 35B-A3B)")
	layout := fs.String("layout", "mlx-q4", "checkpoint layout: mlx-q4 (MLX affine 4-bit, 8-bit router gates) or hf (Hugging Face bf16)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output folder (created; must not already hold a checkpoint)")
	shard := fs.Int64("max-shard-bytes", synth.DefaultMaxShard, "largest shard in bytes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(fs.Output(), "pistil synth: --out is required and no positional arguments are taken")
		fs.Usage()
		return errUsage
	}
	l, err := synth.ParseLayout(*layout)
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
	res, err := synth.Write(synth.Options{Preset: *preset, Layout: l, Seed: *seed, Out: *out, MaxShard: *shard, Progress: progress})
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("wrote %s: preset %s, layout %s, %d tensors, %.3f GB in %.1fs (%.0f MB/s)\n",
		*out, *preset, l, res.Tensors, float64(res.Bytes)/1e9, el.Seconds(), float64(res.Bytes)/el.Seconds()/1e6)
	return nil
}
