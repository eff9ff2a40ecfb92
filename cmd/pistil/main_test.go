package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"pistil/models/synth"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyDir != "" {
		os.RemoveAll(filepath.Dir(tinyDir))
	}
	os.Exit(code)
}

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// tinyModel is synth's "tiny" preset, written once per test binary: random MLX 4-bit
// weights of the real architecture at toy width, its byte-level tokenizer.json (read by
// the real tokenizer code) and the Qwen3.6 chat template.
func tinyModel(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() {
		base, err := os.MkdirTemp("", "pistil-cli-test-")
		if err != nil {
			tinyErr = err
			return
		}
		dir := filepath.Join(base, "tiny")
		if _, err := synth.Write(synth.Options{Preset: "tiny", Layout: synth.MLXQ4, Seed: 7, Out: dir, Workers: 2}); err != nil {
			tinyErr = fmt.Errorf("synth tiny: %w", err)
			return
		}
		tinyDir = dir
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyDir
}

func runForTest(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = runMain(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelpOfEveryCommand: `pistil help CMD` and `CMD --help` exit 0 and show the
// synopsis, an example and the flags, on stdout.
func TestHelpOfEveryCommand(t *testing.T) {
	for name := range commands {
		d, ok := docs[name]
		if !ok || d.synopsis == "" || len(d.examples) == 0 {
			t.Errorf("%s has no synopsis or example in help.go", name)
			continue
		}
		for _, args := range [][]string{{"help", name}, {name, "--help"}, {name, "-h"}} {
			code, out, errOut := runForTest(args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
			}
			for _, want := range []string{"usage: " + d.synopsis, "examples:\n  " + d.examples[0], "flags:\n  -"} {
				if !strings.Contains(out, want) {
					t.Errorf("%v: output lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, _ := runForTest(args...)
		if code != 0 || !strings.Contains(out, "generate") || !strings.Contains(out, "pistil help <command>") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	if code, _, errOut := runForTest("help", "nosuch"); code != 2 || !strings.Contains(errOut, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runForTest(); code != 2 || !strings.Contains(errOut, "usage: pistil") {
		t.Errorf("no arguments: exit %d, %q", code, errOut)
	}
}

// TestBadFlagIsReportedOnce: the flag package's error appears once, with a pointer to
// the help, and no usage dump around it.
func TestBadFlagIsReportedOnce(t *testing.T) {
	for _, args := range [][]string{{"generate", "--bogus"}, {"serve", "--port", "x"}, {"synth", "--seed"}, {"bench", "--repeats=-"}} {
		code, out, errOut := runForTest(args...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q", args, code, out)
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "pistil "+args[0]+": ") || lines[1] != "run 'pistil help "+args[0]+"' for its flags and an example" {
			t.Errorf("%v: stderr %q, want the error line and the help pointer", args, errOut)
		}
	}
	// A failure that is not a flag's exits 1 with its message and no pointer.
	code, _, errOut := runForTest("synth")
	if code != 1 || errOut != "pistil synth: --out DIR is required and no positional arguments are taken\n" {
		t.Errorf("synth without --out: exit %d, %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build info")
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		code, out, _ := runForTest(arg)
		if code != 0 || !strings.HasPrefix(out, "pistil ") || !strings.Contains(out, info.GoVersion) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: exit %d, %q", arg, code, out)
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && !strings.Contains(out, s.Value) {
				t.Errorf("%s: %q lacks the revision %s", arg, out, s.Value)
			}
		}
	}
}
