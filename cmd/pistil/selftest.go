package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"pistil/metal"
)

func init() {
	register(command{name: "selftest", summary: "check a GPU backend on this machine and print a JSON report (selftest metal)", run: runSelftest})
}

func runSelftest(args []string) error { return selftestTo(os.Stdout, args) }

// selftestTo runs `pistil selftest metal`: the Mac self-test of the Metal backend, whose
// JSON report a user can attach to a bug report. It fails when any check fails.
func selftestTo(w io.Writer, args []string) error {
	fs := newFlags("selftest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) != "metal" {
		return fmt.Errorf("usage: pistil selftest metal (the only backend with a self-test)")
	}
	report, err := metal.SelfTest()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		return err
	}
	if report.Result != "PASS" {
		return fmt.Errorf("self-test failed (see the report's checks)")
	}
	return nil
}
