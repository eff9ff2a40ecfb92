package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"pistil/ops/kernels"
)

func init() {
	register(command{name: "kernels", summary: "print the complete kernel source a GPU backend compiles", run: runKernels})
}

// runKernels prints the whole translation unit a backend hands its compiler (NVRTC for
// cuda, newLibraryWithSource for metal), so it can be read or checked by other tools.
func runKernels(args []string) error { return kernelsTo(os.Stdout, args) }

func kernelsTo(w io.Writer, args []string) error {
	fs := newFlags("kernels")
	backend := fs.String("backend", "metal", "the backend whose source to print: metal or cuda")
	tuning := fs.Bool("tuning", false, "list the CUDA kernels' tuning macros with their defaults (pipeline.toml [cuda] kernel_defines) instead of the source")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %v (the backend is chosen with --backend)", fs.Args())
	}
	if *tuning {
		// Each line is NAME=DEFAULT, the form kernel_defines takes.
		macros := kernels.TuningMacros()
		for _, name := range slices.Sorted(maps.Keys(macros)) {
			if _, err := fmt.Fprintf(w, "%s=%s\n", name, macros[name]); err != nil {
				return err
			}
		}
		return nil
	}
	src, err := kernels.Source(*backend)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, src)
	return err
}
