package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// commandDoc is what `pistil help CMD` prints above the flags.
type commandDoc struct {
	synopsis string
	examples []string
}

// docs holds every command's synopsis and examples (a test checks each registered
// command has one). The examples are the README's: each can be pasted twice in a row.
var docs = map[string]commandDoc{
	"compile": {"pistil compile [--model DIR] [--phase decode|prefill|all] [--chunk N] [--context N] [-pass=NAME/off] [-O0] [-o plan.json]",
		[]string{"pistil compile --phase decode", "pistil compile -pass=fuse-dequant/off -o /tmp/plan.json"}},
	"dump": {"pistil dump [--after PASS] [--phase decode|prefill] [--format text|dot|json] [-o FILE]",
		[]string{"pistil dump --after fuse-dequant --format dot -o /tmp/graph.dot"}},
	"generate": {"pistil generate --model DIR|REPO (--prompt TEXT | --prompt - | --prompt-file FILE | --prompt-ids 1,2,3) [--chat [--system TEXT] [--no-think]] [--max-tokens N] [--special]",
		[]string{`pistil generate --model /tmp/tiny --prompt "Hello" --max-tokens 32`,
			`echo "Why is the sky blue?" | pistil generate --model /tmp/tiny --prompt - --chat --system "Answer briefly."`}},
	"chat": {"pistil chat --model DIR|REPO [--system TEXT] [--no-think] [--max-tokens N] [sampling flags]",
		[]string{"pistil chat --model mlx-community/Qwen3.6-35B-A3B-4bit",
			`printf 'Hello\n/reset\nHi again\n' | pistil chat --model /tmp/tiny --max-tokens 16`}},
	"bench": {"pistil bench --model DIR|REPO [--prompts 256,1024] [--contexts 0,4096] [--sweep [--max-length N]] [--json FILE] [--plot FILE.png]\n" +
		"       pistil bench compare A.json B.json\n       pistil bench plot [-o FILE.png] A.json [B.json ...]",
		[]string{"pistil bench --model /tmp/tiny --prompts 64,256 --contexts 0,256 --json /tmp/a.json",
			"pistil bench --model /tmp/tiny --sweep --max-length 1024 --json /tmp/sweep.json --plot /tmp/sweep.png",
			"pistil bench compare /tmp/a.json /tmp/sweep.json",
			"pistil bench plot -o /tmp/both.png /tmp/a.json /tmp/sweep.json"}},
	"check": {"pistil check --model DIR --reference FILE [--chunk N] [--decode-from P] [--tolerance exact|int8]",
		[]string{"pistil check --model testdata/golden/tiny-s1/mlx-q4 --reference testdata/golden/tiny-s1/mlx-q4/reference.safetensors"}},
	"synth": {"pistil synth --preset tiny|wide|full --layout mlx-q4|hf --seed N --out DIR",
		[]string{"pistil synth --preset tiny --layout mlx-q4 --seed 1 --out /tmp/tiny"}},
	"tokenize": {"pistil tokenize --model DIR [--text TEXT] [--decode]   (text or ids on stdin)",
		[]string{`echo -n "Hello, world!" | pistil tokenize --model /tmp/tiny`, `echo 72 105 | pistil tokenize --model /tmp/tiny --decode`}},
	"render": {"pistil render --model DIR --messages FILE.json|- [--tools FILE.json] [--no-think] [--ids]",
		[]string{`echo '[{"role":"user","content":"Hi"}]' | pistil render --model /tmp/tiny --messages -`}},
	"kernels": {"pistil kernels [--backend metal|cuda] [--tuning]",
		[]string{"pistil kernels --backend metal > /tmp/pistil.metal", "pistil kernels --tuning"}},
	"selftest": {"pistil selftest metal [--model DIR] [--decode-steps N]   (on a Mac with Apple silicon)",
		[]string{"pistil selftest metal --model testdata/golden/tiny-s1/mlx-q4 > metal-selftest.json"}},
	"serve": {"pistil serve --model DIR|REPO [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--ctx N] [--log-level info] [--log-json]",
		[]string{"pistil serve --model /tmp/tiny --port 8080"}},
}

// commandHelp prints a command's synopsis, examples and flags.
func commandHelp(w io.Writer, name string) {
	fmt.Fprintf(w, "%s\n\n", commands[name].summary)
	if d, ok := docs[name]; ok {
		fmt.Fprintf(w, "usage: %s\n\nexamples:\n", d.synopsis)
		for _, e := range d.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
		fmt.Fprintln(w)
	}
	if fs := flagSets[name]; fs != nil {
		fmt.Fprintln(w, "flags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// versionLine is the module version and the VCS revision the binary was built from, as
// the Go toolchain stamps them into the build info (`go build` inside a git checkout;
// `go run` and tests leave the revision out).
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "pistil (no build information)"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var revision, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pistil %s", version)
	if revision == "" {
		b.WriteString(", revision unknown (built without VCS stamping, e.g. go run)")
	} else {
		fmt.Fprintf(&b, ", revision %s", revision)
		if when != "" {
			fmt.Fprintf(&b, " (%s)", when)
		}
		if modified {
			b.WriteString(", with uncommitted changes")
		}
	}
	fmt.Fprintf(&b, ", %s", info.GoVersion)
	return b.String()
}
