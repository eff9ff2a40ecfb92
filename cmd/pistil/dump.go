package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"pistil/graph"
	"pistil/ops"
	"pistil/passes"
)

func init() {
	register(command{name: "dump", summary: "write the model graph after any pass (text, dot or json)", run: runDump})
}

func runDump(args []string) error {
	fs := newFlags("dump")
	var cf compileFlags
	cf.register(fs)
	after := fs.String("after", "", "the pass after which to dump (default: the graph as declared, before any pass)")
	phase := fs.String("phase", "decode", "phase to compile for: decode or prefill")
	format := fs.String("format", "text", "text (the parseable graph format, analyses as # comments), dot or json")
	out := fs.String("o", "", "write to this file instead of standard output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *format != "text" && *format != "dot" && *format != "json" {
		return fmt.Errorf("--format %q: want text, dot or json", *format)
	}
	pl, cfg, g, _, err := cf.setup(os.Stderr)
	if err != nil {
		return err
	}
	u := &passes.Unit{Graph: g, Ops: ops.Default}
	if *after != "" {
		phases, err := phaseList(pl, cf.backend, *phase, cf.chunk, cf.context)
		if err != nil {
			return err
		}
		if len(phases) != 1 {
			return fmt.Errorf("--phase: dump one phase at a time (decode or prefill)")
		}
		u.Phase = phases[0]
		if err := passes.Run(u, cfg, *after); err != nil {
			return err
		}
		if !contains(u.Ran, *after) {
			return fmt.Errorf("pass %s is switched off, so there is nothing after it to dump", *after)
		}
	}
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	switch *format {
	case "text":
		_, err = io.WriteString(w, passes.Dump(u))
	case "dot":
		_, err = io.WriteString(w, graph.DOT(u.Graph, ops.Default))
	case "json":
		var data []byte
		if data, err = json.MarshalIndent(u.Graph, "", " "); err == nil {
			_, err = w.Write(append(data, '\n'))
		}
	}
	if err != nil {
		return fmt.Errorf("write dump: %w", err)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
