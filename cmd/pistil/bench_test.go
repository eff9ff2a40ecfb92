package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// silenceBench sends bench's table to a buffer for the test's duration.
func silenceBench(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	old := benchOut
	benchOut = &buf
	t.Cleanup(func() { benchOut = old })
	return &buf
}

// TestBenchWritesEveryMeasurement runs the command on the golden tiny model with tiny
// sizes and checks the table and the JSON's structure; speeds are only checked to be
// positive and consistent with their raw runs, never against a time.
// runBenchJSON runs the command with args and --json, and returns its output, the JSON's
// path and bytes, and the report they decode to.
func runBenchJSON(t *testing.T, args ...string) (text, file string, data []byte, rep benchReport) {
	t.Helper()
	out := silenceBench(t)
	file = filepath.Join(t.TempDir(), "bench.json")
	if err := runBench(append(args, "--json", file)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("the JSON does not decode: %v\n%s", err, data)
	}
	return out.String(), file, data, rep
}

func TestBenchWritesEveryMeasurement(t *testing.T) {
	text, file, data, rep := runBenchJSON(t, "--model", goldenMLX, "--prompts", "3,16", "--contexts", "0, 8",
		"--decode-tokens", "4", "--repeats", "3", "--warmup", "1", "--chunk", "8")
	for _, want := range []string{"backend cpu", "GOMAXPROCS", "model mlx-q4", "optional passes on:",
		"near uniform", "16 prompt", "4 at context 8", "session capacity 16 tokens", file,
		"streaming read bandwidth", "GFLOP/s", "GB/s (line ", "after these runs)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	if rep.Machine.Backend != "cpu" || rep.Machine.GOMAXPROCS <= 0 || rep.Model.Name != "mlx-q4" ||
		rep.Pipeline.Chunk != 8 || !strings.Contains(rep.Pipeline.Passes, "fuse-dequant") || !strings.Contains(rep.Note, "near uniform") {
		t.Errorf("setup fields: %+v %+v %+v note %q", rep.Machine, rep.Model, rep.Pipeline, rep.Note)
	}
	// On Linux the CPU backend looks at the checkpoint's page cache (huge_page_cache) and
	// the report says what it found, for the whole file.
	if runtime.GOOS == "linux" {
		st, err := os.Stat(filepath.Join(goldenMLX, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if pc := rep.PageCache; pc == nil || pc.Bytes != st.Size() || pc.HugeBytes > pc.Bytes || !strings.Contains(text, "checkpoint in 2 MiB pages") {
			t.Errorf("page cache report %+v (the checkpoint is %d bytes)", pc, st.Size())
		}
	}
	if rep.Result == nil || rep.Capacity != 16 { // max(16-token prompt, 8 context + 4 decode)
		t.Fatalf("capacity: %s", data)
	}
	if len(rep.Prefill) != 2 || rep.Prefill[0].Tokens != 3 || rep.Prefill[1].Tokens != 16 {
		t.Errorf("prefill measurements: %+v", rep.Prefill)
	}
	if len(rep.Decode) != 2 || rep.Decode[0].Context != 0 || rep.Decode[1].Context != 8 ||
		rep.Decode[0].Tokens != 4 || rep.Decode[1].Tokens != 4 {
		t.Errorf("decode measurements: %+v", rep.Decode)
	}
	for _, m := range append(rep.Prefill, rep.Decode...) {
		if len(m.Runs) != 3 {
			t.Errorf("%d tokens at %d: %d runs, want 3 (warm-up runs are not recorded)", m.Tokens, m.Context, len(m.Runs))
		}
		for _, r := range m.Runs {
			if r.Seconds <= 0 || r.TokensPerSec <= 0 || math.Abs(r.TokensPerSec*r.Seconds-float64(m.Tokens)) > 1e-6*float64(m.Tokens) {
				t.Errorf("%d tokens at %d: run %+v", m.Tokens, m.Context, r)
			}
		}
		if !(m.MinTPS > 0 && m.MinTPS <= m.MedianTPS && m.MedianTPS <= m.MaxTPS) {
			t.Errorf("%d tokens at %d: min %v median %v max %v", m.Tokens, m.Context, m.MinTPS, m.MedianTPS, m.MaxTPS)
		}
	}

	// Every raw field is present under its documented name.
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"machine", "model", "pipeline", "settings", "note", "capacity", "prefill", "decode"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("JSON lacks %q", key)
		}
	}
	run := raw["decode"].([]any)[1].(map[string]any)["runs"].([]any)[0].(map[string]any)
	if _, ok := run["tokens_per_sec"]; !ok {
		t.Errorf("a run lacks tokens_per_sec: %v", run)
	}
}

// TestBenchOpProfile: --op-profile prints each measurement's time by op after the table
// and writes it into the JSON (bench.TestMeasureOpProfile checks its numbers).
func TestBenchOpProfile(t *testing.T) {
	text, _, _, rep := runBenchJSON(t, "--model", goldenMLX, "--prompts", "8", "--contexts", "4", "--decode-tokens", "2",
		"--repeats", "1", "--chunk", "8", "--bandwidth-mib", "0", "--op-profile")
	for _, want := range []string{"prefill 8 prompt, by op", "decode 2 at context 4, by op", "dispatches  ms a token",
		"expert_matmul_swiglu_shared", "(outside the dispatches)"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, m := range append(rep.Prefill, rep.Decode...) {
		if len(m.Ops) == 0 || m.Ops[0].Op == "" || m.Ops[0].Dispatches <= 0 || m.Ops[0].SecondsPerToken <= 0 {
			t.Errorf("%d tokens at %d: ops %+v", m.Tokens, m.Context, m.Ops)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	silenceBench(t)
	model := []string{"--model", goldenMLX}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--prompts", "8"}, "--model DIR is required"},
		{append(model, "--prompts", "0"), "prompt length 0 must be positive"},
		{append(model, "--prompts", "8,-4"), "prompt length -4 must be positive"},
		{append(model, "--prompts", "8,abc"), `--prompts: "abc" is not a whole number`},
		{append(model, "--contexts", "-1"), "context length -1 must not be negative"},
		{append(model, "--decode-tokens", "0"), "decode tokens 0 must be positive"},
		{append(model, "--repeats", "-2"), "repeats -2 must be positive"},
		{append(model, "--warmup", "-1"), "warm-up runs -1 must not be negative"},
		{append(model, "--chunk", "-8"), "--chunk -8 must not be negative"},
		{append(model, "--prompts", "", "--contexts", ""), "nothing to measure"},
		{append(model, "--backend", "tpu"), `backend "tpu" is not available`},
		{append(model, "extra"), "unexpected arguments"},
		{append(model, "--op-profile", "--sweep"), "--op-profile goes with measured points, not --sweep"},
		{append(model, "--op-profile", "--backend", "cuda"), "--op-profile times the CPU backend's dispatches; the cuda backend queues"},
		// The tiny model's config allows 262144 tokens of context.
		{append(model, "--prompts", "300000", "--contexts", "0"), "prompt length 300000 exceeds the model's maximum context 262144"},
		{append(model, "--prompts", "8", "--contexts", "262140", "--decode-tokens", "8"),
			"context 262140 plus 8 decode tokens exceeds the model's maximum context 262144"},
	}
	for _, c := range cases {
		file := filepath.Join(t.TempDir(), "bench.json")
		err := runBench(append(c.args, "--json", file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.args, err, c.want)
		}
		if _, statErr := os.Stat(file); !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("%q: a failed run wrote %s", c.args, file)
		}
	}
}
