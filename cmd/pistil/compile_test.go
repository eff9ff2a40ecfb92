package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/plan"
)

// A malformed or inconsistent config fails compile with a message naming the field.
func TestCompileRejectsBadConfigs(t *testing.T) {
	reportOut = io.Discard
	base, err := os.ReadFile(fixtures.Path("golden/tiny-s1/hf/config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, old, new, want string
	}{
		{"heads not dividing", `"num_key_value_heads": 1`, `"num_key_value_heads": 3`, "num_key_value_heads"},
		{"unknown layer type", `"linear_attention"`, `"sliding_attention"`, "layer_types"},
		{"missing field", `"hidden_size"`, `"hidden_size_renamed"`, "hidden_size"},
		{"not json", `{`, `[`, "JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(string(base), c.old, c.new, 1)
			if text == string(base) {
				t.Fatalf("edit %q not applied to the tiny config", c.old)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			err := runCompile([]string{"--model", dir, "--phase", "decode"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
	if err := runCompile([]string{"--model", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing config.json: %v", err)
	}
	if err := runCompile([]string{"--phase", "train"}); err == nil || !strings.Contains(err.Error(), "train") {
		t.Errorf("bad phase: %v", err)
	}
	if err := runCompile([]string{"-pass=schedule/off"}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("required pass off: %v", err)
	}
}

func TestCompileAndDumpTinyConfigs(t *testing.T) {
	reportOut = io.Discard
	out := filepath.Join(t.TempDir(), "plan.json")
	for _, layout := range []string{"hf", "mlx-q4"} {
		dir := (fixtures.Path("golden/tiny-s1") + "/") + layout
		if err := runCompile([]string{"--model", dir, "--chunk", "8", "-o", out}); err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		plans, err := plan.UnmarshalList(data)
		if err != nil || len(plans) != 2 || plans[0].Phase != "decode" || plans[1].Tokens != 8 {
			t.Fatalf("%s: -o wrote %d plans (%v)", layout, len(plans), err)
		}
		if err := runDump([]string{"--model", dir, "--after", "lower", "--phase", "prefill", "--chunk", "8", "-o", out}); err != nil {
			t.Fatalf("%s dump: %v", layout, err)
		}
	}
	if err := runDump([]string{"--after", "fuse-dequant", "-O0"}); err == nil || !strings.Contains(err.Error(), "switched off") {
		t.Errorf("dump after a disabled pass: %v", err)
	}
	// A dump is of the backend's compilation: a GPU has no kernel for matmul_router, so
	// its graph after expand-for-backend has the projection and the router apart, where
	// the CPU's keeps the fused op.
	for backend, want := range map[string]bool{"cpu": true, "cuda": false, "metal": false} {
		if err := runDump([]string{"--backend", backend, "--after", "expand-for-backend", "-o", out}); err != nil {
			t.Fatalf("dump --backend %s: %v", backend, err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(data), "= matmul_router "); got != want {
			t.Errorf("dump --backend %s after expand-for-backend: matmul_router present %v, want %v", backend, got, want)
		}
	}
}

// `pistil compile --backend B -o` writes, byte for byte, the plan exec.Open loads for
// backend B: for the CPU the plan the opened model holds, for the GPUs (no GPU here) the
// plan exec compiles for them with the same options.
func TestCompilePrintsThePlanThatRuns(t *testing.T) {
	reportOut = io.Discard
	out := filepath.Join(t.TempDir(), "plan.json")
	for _, layout := range []string{"hf", "mlx-q4"} {
		dir := fixtures.Golden(layout)
		m, err := exec.Open(dir, exec.Options{Backend: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		for _, backend := range []string{"cpu", "cuda", "metal"} {
			chunk := m.Chunk()
			if backend != "cpu" {
				chunk = exec.DefaultChunkFor(backend)
			}
			for _, phase := range []struct {
				name   string
				tokens int
			}{{"decode", 1}, {"prefill", chunk}} {
				if err := runCompile([]string{"--model", dir, "--backend", backend, "--phase", phase.name, "-o", out}); err != nil {
					t.Fatalf("%s %s %s: %v", layout, backend, phase.name, err)
				}
				printed, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				var runs *plan.Plan
				if backend == "cpu" {
					runs, err = m.Plan(phase.tokens)
				} else {
					runs, err = exec.CompilePlan(dir, exec.Options{Backend: backend}, phase.tokens)
				}
				if err != nil {
					t.Fatal(err)
				}
				want, err := plan.Marshal(runs)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(printed, want) {
					t.Errorf("%s %s %s: the printed plan differs from the plan that runs", layout, backend, phase.name)
				}
			}
		}
		m.Close()
	}
	if err := runCompile([]string{"--backend", "tpu", "--phase", "decode"}); err == nil || !strings.Contains(err.Error(), "tpu") {
		t.Errorf("unknown backend: %v", err)
	}
}
