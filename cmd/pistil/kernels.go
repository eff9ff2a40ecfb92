package main

import (
	"fmt"
	"io"
	"os"

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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %v (the backend is chosen with --backend)", fs.Args())
	}
	src, err := kernels.Source(*backend)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, src)
	return err
}
