package passes_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenPhases are the phases the goldens cover: decode and an 8-token prefill chunk.
var goldenPhases = []passes.Phase{
	{Name: "decode", Tokens: 1, Context: 64},
	{Name: "prefill", Tokens: 8, Context: 64, LastLogitsOnly: true},
}

// tinyGraph declares the tiny golden model from its config.json alone, as `pistil
// compile --model` does: MLX weight types when the config is quantized, else BF16.
func tinyGraph(t *testing.T, layout string) *graph.Graph {
	t.Helper()
	cfg, err := qwen35moe.LoadConfig(goldenDir + layout)
	if err != nil {
		t.Fatal(err)
	}
	wt := qwen35moe.MLXWeightType(cfg)
	if cfg.Quant == nil {
		wt = func(name string, s graph.Shape) (graph.Type, error) { return graph.TensorType(graph.BF16, s...), nil }
	}
	g, err := qwen35moe.Build(cfg, qwen35moe.BuildOptions{WeightType: wt})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGoldens dumps the tiny models after every pass and both plans, and compares with
// testdata/<layout>/<phase>/ (go test ./passes -run Goldens -update rewrites them). A
// refactor leaves them unchanged; a deliberate change shows as a readable diff.
func TestGoldens(t *testing.T) {
	for _, layout := range []string{"hf", "mlx-q4"} {
		g := tinyGraph(t, layout)
		checkGolden(t, filepath.Join("testdata", layout, "00__build.golden"), graph.Print(g))
		for _, ph := range goldenPhases {
			dir := filepath.Join("testdata", layout, ph.Name)
			cfg := passes.Config{Check: true, Dump: map[string]bool{}}
			for _, name := range passes.PassNames() {
				cfg.Dump[name] = true
			}
			cfg.DumpTo = func(phase string, seq int, pass, text string) error {
				checkGolden(t, filepath.Join(dir, fmt.Sprintf("%02d__%s.golden", seq+1, pass)), text)
				return nil
			}
			p, err := passes.Compile(g, ops.Default, ph, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", layout, "plan_"+ph.Name+".golden"), p.Text())
			data, err := plan.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", layout, "plan_"+ph.Name+".json.golden"), string(data)+"\n")
			// The CUDA plan of the same phase: fused ops expanded where CUDA has no
			// kernel, attention split for decode, every dispatch's kernel and grid.
			gpuPhase := ph
			gpuPhase.Backend = "cuda"
			gp, err := passes.Compile(g, ops.Default, gpuPhase, passes.Config{Check: true})
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", layout, "plan_"+ph.Name+".cuda.golden"), gp.Text())
		}
	}
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./passes -run Goldens -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden (rerun with -update if the change is meant):\n%s", path, firstDiff(string(want), got))
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  golden: %s\n  now:    %s", i+1, w, g)
		}
	}
	return "(same lines, different bytes)"
}

// TestGoldensReadBack parses every graph golden back (the analyses are '#' comments) and
// checks it against the op table; it decodes every plan golden, validates it and
// re-encodes it byte for byte.
func TestGoldensReadBack(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.golden")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("testdata/*/*/*.golden")
	files = append(files, more...)
	// Passes that are off by default leave no dump.
	dumped := 0
	for _, p := range passes.Passes {
		if !p.DefaultOff {
			dumped++
		}
	}
	if len(files) < 2*(1+2*(dumped+2)) {
		t.Fatalf("only %d golden files: run go test ./passes -run Goldens -update", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(f, ".json.golden"):
			p, err := plan.Unmarshal(data)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			again, _ := plan.Marshal(p)
			if !bytes.Equal(append(again, '\n'), data) {
				t.Errorf("%s: JSON round trip changes the plan", f)
			}
			if p.Totals != plan.ComputeTotals(p) {
				t.Errorf("%s: totals %+v, recomputed %+v", f, p.Totals, plan.ComputeTotals(p))
			}
		case strings.Contains(filepath.Base(f), "plan_"):
			if !strings.HasPrefix(string(data), "plan ") {
				t.Errorf("%s: not a plan text", f)
			}
		default:
			g, err := graph.Parse(string(data))
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if err := graph.Check(g, ops.Default); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			var graphPart strings.Builder
			for _, line := range strings.SplitAfter(string(data), "\n") {
				if !strings.HasPrefix(line, "#") {
					graphPart.WriteString(line)
				}
			}
			if graph.Print(g) != graphPart.String() {
				t.Errorf("%s: printing the parsed graph does not give the golden back", f)
			}
		}
	}
}
