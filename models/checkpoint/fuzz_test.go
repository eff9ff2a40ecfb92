package checkpoint

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
)

func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// fuzzDir is a folder holding links to the golden checkpoint's weights under both the
// single-file name and a shard name, for the fuzzers to put a config or index beside.
func fuzzDir(tb testing.TB, src string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "pistil-fuzz-ck")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	abs, _ := filepath.Abs(filepath.Join(src, "model.safetensors"))
	for _, name := range []string{"model.safetensors", "shard-1.safetensors"} {
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// The budget for opening and binding the tiny checkpoint: its transformed tensors are a
// few MB; a lying file must not make it more.
const openBudget = 64 << 20

// FuzzCheckpointOpen writes fuzzed config.json bytes beside the real weights and opens
// and binds the checkpoint: no panic, no allocation beyond the budget, and whatever opens
// agrees with the tensors on the layer count.
func FuzzCheckpointOpen(f *testing.F) {
	for _, layout := range []string{goldenHF, goldenMLX} {
		data, err := os.ReadFile(filepath.Join(layout, "config.json"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, layout == goldenMLX)
	}
	f.Add([]byte(`{"text_config":{"num_hidden_layers":1000000000,"full_attention_interval":4}}`), false)
	f.Add([]byte(`{"model_type":"qwen3_5_moe_text","hidden_size":192,"num_hidden_layers":8,"vocab_size":100000000}`), false)
	hf, mlx := fuzzDir(f, goldenHF), fuzzDir(f, goldenMLX)
	os.Remove(filepath.Join(hf, "shard-1.safetensors"))
	os.Remove(filepath.Join(mlx, "shard-1.safetensors"))
	f.Fuzz(func(t *testing.T, config []byte, useMLX bool) {
		dir := hf
		if useMLX {
			dir = mlx
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
			t.Fatal(err)
		}
		var layers, want int
		n := allocatedBy(func() {
			ck, err := Open(dir)
			if err != nil {
				return
			}
			defer ck.Close()
			layers, want = ck.Config().NumLayers, 8
			ck.Bind(qwen35moe.WeightNames(ck.Config()))
		})
		if layers != want {
			t.Fatalf("opened with %d layers; the tensors hold %d", layers, want)
		}
		if n > openBudget+uint64(64*len(config)) {
			t.Fatalf("open and bind allocated %d bytes", n)
		}
	})
}

// FuzzShardIndex writes fuzzed model.safetensors.index.json bytes beside two shard names
// (both the real weights): no panic, no allocation beyond the budget, and an accepted
// index places every tensor in the shard that holds it.
func FuzzShardIndex(f *testing.F) {
	set, err := safetensors.OpenDir(goldenHF)
	if err != nil {
		f.Fatal(err)
	}
	names := set.Names()
	set.Close()
	f.Add([]byte(`{"metadata":{"total_size":1},"weight_map":{"` + names[0] + `":"model.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"` + names[0] + `":"../model.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"` + names[0] + `":"shard-1.safetensors","` + names[1] + `":"model.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	dir := fuzzDir(f, goldenHF)
	f.Fuzz(func(t *testing.T, index []byte) {
		if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), index, 0o644); err != nil {
			t.Fatal(err)
		}
		n := allocatedBy(func() {
			s, err := safetensors.OpenDir(dir)
			if err != nil {
				return
			}
			defer s.Close()
			for _, name := range s.Names() {
				if _, err := s.Data(name); err != nil {
					t.Fatalf("accepted index, but %s has no data: %v", name, err)
				}
			}
		})
		if n > openBudget+uint64(64*len(index)) {
			t.Fatalf("opening allocated %d bytes", n)
		}
	})
}
