package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"pistil/models/chat"
	"pistil/models/tokenizer"
)

// runGenerateForTest runs generate with stdin and no signals; it returns stdout, stderr.
func runGenerateForTest(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := generateCmd(append([]string{"--workers", "1", "--temperature", "0"}, args...), strings.NewReader(stdin), &out, &errOut, make(chan os.Signal))
	return out.String(), errOut.String(), err
}

// TestGeneratePromptSources: --prompt TEXT, --prompt - (stdin), --prompt-file and
// --prompt-ids (inline and from stdin) give the same greedy continuation of one prompt.
func TestGeneratePromptSources(t *testing.T) {
	dir := tinyModel(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const text = "The quick brown fox jumps over the lazy dog."
	var ids []string
	for _, id := range tok.Encode(text) {
		ids = append(ids, strconv.Itoa(int(id)))
	}
	file := filepath.Join(t.TempDir(), "prompt.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--model", dir, "--max-tokens", "12", "--log-level", "off"}
	want, stats, err := runGenerateForTest(t, "", append(base, "--prompt", text)...)
	if err != nil {
		t.Fatal(err)
	}
	if want == "" || !strings.Contains(stats, "generated 12 tokens") || !strings.Contains(stats, "prompt "+strconv.Itoa(len(ids))+" tokens") {
		t.Fatalf("output %q, stats %q", want, stats)
	}
	for name, c := range map[string]struct {
		stdin string
		args  []string
	}{
		"stdin":         {text, []string{"--prompt", "-"}},
		"file":          {"", []string{"--prompt-file", file}},
		"ids":           {"", []string{"--prompt-ids", strings.Join(ids, ",")}},
		"ids via stdin": {strings.Join(ids, " ") + "\n", []string{"--prompt-ids", "-"}},
	} {
		got, _, err := runGenerateForTest(t, c.stdin, append(base, c.args...)...)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
}

// TestGenerateSystemMessage: --system renders a system turn through the chat template.
func TestGenerateSystemMessage(t *testing.T) {
	dir := tinyModel(t)
	tok, _ := tokenizer.Load(dir)
	tmpl, err := chat.LoadTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	think := true
	rendered, err := tmpl.Render(chat.RenderOptions{Messages: []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}},
		AddGenerationPrompt: true, EnableThinking: &think})
	if err != nil {
		t.Fatal(err)
	}
	_, stats, err := runGenerateForTest(t, "", "--model", dir, "--max-tokens", "2", "--prompt", "Hi", "--system", "Be brief.", "--log-level", "off")
	if err != nil {
		t.Fatal(err)
	}
	if want := "prompt " + strconv.Itoa(len(tok.Encode(rendered))) + " tokens"; !strings.Contains(stats, want) {
		t.Errorf("stats %q lack %q (the system turn was not rendered)", stats, want)
	}
}

// TestGenerateRefusesWhatCannotRun: lengths past the model's maximum context (1e9 and
// the largest int64 must not allocate or overflow), sampling values out of the server's
// ranges, and conflicting prompt flags are errors naming the flag.
func TestGenerateRefusesWhatCannotRun(t *testing.T) {
	dir := tinyModel(t)
	for args, want := range map[string]string{
		"--max-tokens 1000000000":          "exceeds the model's maximum context of 262144 tokens",
		"--max-tokens 9223372036854775807": "exceeds the model's maximum context of 262144 tokens",
		"--max-tokens 0":                   "--max-tokens 0 must be positive",
		"--max-tokens -5":                  "--max-tokens -5 must be positive",
		"--context 300000":                 "--context 300000: must be between 1",
		"--context 2":                      "leaves no room to generate",
		"--temperature 2.5":                "--temperature 2.5: must be between 0 and 2",
		"--temperature NaN":                "--temperature NaN",
		"--top-p 1.5":                      "--top-p 1.5",
		"--min-p -0.1":                     "--min-p -0.1",
		"--top-k -2":                       "--top-k -2",
		"--presence-penalty 3":             "--presence-penalty 3",
		"--frequency-penalty -2.5":         "--frequency-penalty -2.5",
		"--seed -7":                        "--seed -7",
		"--prompt-ids 1,2":                 "exactly one of",
		"--prompt-file /nonexistent/p.txt": "no such file",
	} {
		fields := strings.Fields(args)
		full := append([]string{"--model", dir, "--log-level", "off"}, fields...)
		if fields[0] != "--prompt-file" {
			full = append(full, "--prompt", "Hello")
		}
		_, _, err := runGenerateForTest(t, "", full...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", args, err, want)
		}
	}
}

// signallingWriter sends sig once the first generated text arrives.
type signallingWriter struct {
	bytes.Buffer
	once sync.Once
	sigs chan os.Signal
	sig  os.Signal
}

func (w *signallingWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.once.Do(func() { w.sigs <- w.sig })
	}
	return w.Buffer.Write(p)
}

// TestGenerateInterrupted: SIGINT (Ctrl-C) or SIGTERM during a generation stops it,
// prints what was done, and exits 130 or 143.
func TestGenerateInterrupted(t *testing.T) {
	dir := tinyModel(t)
	tok, _ := tokenizer.Load(dir)
	prompt := "prefilled " + strconv.Itoa(len(tok.Encode("Hello"))) + " of " + strconv.Itoa(len(tok.Encode("Hello"))) + " prompt tokens"
	for _, c := range []struct {
		sig  os.Signal
		code int
	}{{os.Interrupt, 130}, {syscall.SIGTERM, 143}} {
		sigs := make(chan os.Signal, 1)
		out := &signallingWriter{sigs: sigs, sig: c.sig}
		var errOut bytes.Buffer
		err := generateCmd([]string{"--model", dir, "--workers", "1", "--log-level", "off", "--prompt", "Hello", "--max-tokens", "100000"},
			strings.NewReader(""), out, &errOut, sigs)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != c.code {
			t.Errorf("%v: got %v, want exit %d", c.sig, err, c.code)
			continue
		}
		if !strings.Contains(errOut.String(), "interrupted ("+c.sig.String()+"): "+prompt) ||
			!strings.Contains(errOut.String(), "generated ") {
			t.Errorf("%v: stderr %q", c.sig, errOut.String())
		}
		if strings.Contains(errOut.String(), "step at position") {
			t.Errorf("%v: the engine's cancellation error leaked: %q", c.sig, errOut.String())
		}
	}
}

// TestSpecialTokensHidden: with the real Qwen tokenizer, <|im_end|> is left out of the
// printed text unless --special; <think> is not special and always printed.
func TestSpecialTokensHidden(t *testing.T) {
	tok, err := tokenizer.Load(qwen3TokDir)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("<think>ok</think>Hello<|im_end|>")
	for _, special := range []bool{false, true} {
		p := newTokenPrinter(tok, special)
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(p.push(id))
		}
		b.WriteString(p.flush())
		want := "<think>ok</think>Hello"
		if special {
			want += "<|im_end|>"
		}
		if b.String() != want {
			t.Errorf("special=%v: %q, want %q", special, b.String(), want)
		}
	}
}

// TestGeneratePrefillProgress: a prompt longer than two prefill chunks reports tokens
// done, as plain lines when stderr is not a terminal; the output is the same as with
// one chunk for the whole prompt.
func TestGeneratePrefillProgress(t *testing.T) {
	dir := tinyModel(t)
	tok, _ := tokenizer.Load(dir)
	text := strings.Repeat("pistil prefill ", 4)
	n := strconv.Itoa(len(tok.Encode(text)))
	chunked, stats, err := runGenerateForTest(t, "", "--model", dir, "--chunk", "4", "--max-tokens", "4", "--prompt", text, "--log-level", "off")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "prefill: 4 of "+n+" tokens") || !strings.Contains(stats, "prefill: "+n+" of "+n+" tokens (100%)") || strings.Contains(stats, "\r") {
		t.Errorf("stderr %q lacks the progress lines", stats)
	}
	// Loading shows the weights bound (plain lines, ending at 100%).
	if !regexp.MustCompile(`loading weights: (\d+\.\d) of (\d+\.\d) MB \(100%\)`).MatchString(stats) {
		t.Errorf("stderr %q lacks the loading progress", stats)
	}
	whole, stats, err := runGenerateForTest(t, "", "--model", dir, "--max-tokens", "4", "--prompt", text, "--log-level", "off")
	if err != nil || strings.Contains(stats, "prefill:") {
		t.Fatalf("%v; a short prompt showed progress: %q", err, stats)
	}
	if chunked != whole {
		t.Errorf("chunked prefill continued %q, whole %q", chunked, whole)
	}
}

// pistil generate --json-schema on a random-weight model (noise unconstrained) prints
// JSON that has the schema's shape, thinking on and off; an unsupported keyword is an
// error naming it.
func TestGenerateJSONSchema(t *testing.T) {
	model := tinyModel(t)
	schema := filepath.Join(t.TempDir(), "schema.json")
	os.WriteFile(schema, []byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9},"tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":2}},"required":["n","tags"],"additionalProperties":false}`), 0o644)
	for seed := 0; seed < 4; seed++ {
		args := []string{"--model", model, "--prompt", "numbers", "--chat", "--max-tokens", "80",
			"--temperature", "1", "--seed", strconv.Itoa(seed), "--json-schema", schema}
		thinking := seed%2 == 1
		if !thinking {
			args = append(args, "--no-think")
		}
		out, _, err := runGenerateForTest(t, "", args...)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if thinking {
			// the reasoning is free text; the answer follows </think>
			i := strings.LastIndex(out, "</think>")
			if i < 0 {
				t.Fatalf("seed %d: no </think> in %q", seed, out)
			}
			out = out[i+len("</think>"):]
		}
		var v struct {
			N    *int     `json:"n"`
			Tags []string `json:"tags"`
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || v.N == nil || *v.N < 1 || *v.N > 9 || len(v.Tags) > 2 {
			t.Fatalf("seed %d: output %q does not follow the schema (%v)", seed, out, err)
		}
		for _, tag := range v.Tags {
			if tag != "x" && tag != "y" {
				t.Fatalf("seed %d: tag %q", seed, tag)
			}
		}
	}
	os.WriteFile(schema, []byte(`{"type":"string","pattern":"^a"}`), 0o644)
	if _, _, err := runGenerateForTest(t, "", "--model", model, "--prompt", "x", "--json-schema", schema); err == nil || !strings.Contains(err.Error(), `"pattern"`) {
		t.Fatalf("unsupported keyword: %v", err)
	}
}
