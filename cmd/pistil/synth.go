package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"pistil/models/synth"
)

func init() {
	register(command{name: "synth", summary: "write a random checkpoint of any dimensions (a preset: tiny, wide, full; changed by flags or a dims file)", run: runSynth})
}

// synthManifest is the file `pistil synth` leaves in its output folder. It marks the
// folder as synth's, so a second run into it (the README's example pasted twice) replaces
// what the first wrote, while a folder holding anyone else's checkpoint is refused.
const synthManifest = "pistil-synth.json"

type synthRecord struct {
	Preset   string   `json:"preset"`
	Layout   string   `json:"layout"`
	Seed     uint64   `json:"seed"`
	Complete bool     `json:"complete"`
	Kept     []string `json:"kept"`    // files that were in the folder before synth wrote to it
	Written  []string `json:"written"` // files synth wrote (known once complete)
}

func runSynth(args []string) error {
	fs := newFlags("synth")
	preset := fs.String("preset", "tiny", "base dimensions: "+strings.Join(synth.PresetNames(), ", ")+" (full is the real 35B-A3B); a dims file and the dimension flags change them")
	dimsFile := fs.String("config", "", "dims file applied over the preset: a JSON object of Hugging Face text-config keys (hidden_size, num_experts, ...), or a model's config.json")
	layout := fs.String("layout", "mlx-q4", "checkpoint layout: mlx-q4 (MLX affine 4-bit, 8-bit router gates), mlx-q8 (MLX affine 8-bit) or hf (Hugging Face bf16)")
	seed := fs.Uint64("seed", 1, "random seed; the same seed writes the same bytes")
	out := fs.String("out", "", "output folder (created; an earlier synth output there is replaced, any other checkpoint refused)")
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
	rec := synthRecord{Preset: *preset, Layout: string(l), Seed: *seed}
	replaced, err := clearSynthOutput(*out, &rec)
	if err != nil {
		return err
	}
	if replaced {
		fmt.Fprintf(os.Stderr, "replacing the earlier pistil synth output in %s\n", *out)
	}
	if err := writeSynthRecord(*out, rec); err != nil {
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
	names, err := folderFiles(*out)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n != synthManifest && !slices.Contains(rec.Kept, n) {
			rec.Written = append(rec.Written, n)
		}
	}
	rec.Complete = true
	if err := writeSynthRecord(*out, rec); err != nil {
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

// clearSynthOutput prepares dir for a new synth run. A folder with synth's manifest has
// the files of that run removed (all files not there before it, when the run was
// interrupted); rec.Kept lists the files that stay. A folder without the manifest is left
// alone: synth.Write refuses it if it holds a checkpoint.
func clearSynthOutput(dir string, rec *synthRecord) (replaced bool, err error) {
	names, err := folderFiles(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	data, err := os.ReadFile(filepath.Join(dir, synthManifest))
	if errors.Is(err, os.ErrNotExist) {
		rec.Kept = names
		for _, n := range names {
			if strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".safetensors.index.json") {
				return false, fmt.Errorf("%s already holds a checkpoint (%s) that pistil synth did not write (no %s); "+
					"give --out an empty or new folder", dir, n, synthManifest)
			}
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var old synthRecord
	if err := json.Unmarshal(data, &old); err != nil {
		return false, fmt.Errorf("%s: %w (remove it to reuse the folder)", filepath.Join(dir, synthManifest), err)
	}
	remove := old.Written
	if !old.Complete {
		for _, n := range names {
			if !slices.Contains(old.Kept, n) {
				remove = append(remove, n)
			}
		}
	}
	for _, n := range remove {
		if n == synthManifest || filepath.Base(n) != n {
			continue // only plain names in the folder itself
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("remove the earlier synth output: %w", err)
		}
	}
	rec.Kept = old.Kept
	return true, nil
}

func writeSynthRecord(dir string, rec synthRecord) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(rec, "", "  ")
	return os.WriteFile(filepath.Join(dir, synthManifest), append(data, '\n'), 0o644)
}

// folderFiles lists the regular files directly in dir.
func folderFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
