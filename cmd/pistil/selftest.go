package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"pistil/exec"
	"pistil/metal"
	"pistil/verify"
)

func init() {
	register(command{name: "selftest", summary: "check a GPU backend on this machine and print a JSON report (selftest metal)", run: runSelftest})
}

func runSelftest(args []string) error { return selftestTo(os.Stdout, args) }

// selftestTo runs `pistil selftest metal [--model DIR]`: the Mac self-test of the Metal
// backend, whose JSON report a user can attach to a bug report. With --model it also
// checks the model against the reference.safetensors beside it (as pistil check does),
// and measures prefill and decode speed on it. It fails when any check fails.
func selftestTo(w io.Writer, args []string) error {
	fs := newFlags("selftest")
	model := fs.String("model", "", "a model directory to check and time (the tiny golden model, testdata/golden/tiny-s1/mlx-q4, has a reference)")
	steps := fs.Int("decode-steps", 32, "decode steps to time on --model")
	if err := fs.Parse(reorderFlags(args)); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) != "metal" {
		return fmt.Errorf("usage: pistil selftest metal [--model DIR] (the only backend with a self-test)")
	}
	report, err := metal.SelfTest()
	if err != nil {
		return err
	}
	if *model == "" {
		report.Skip("a model end to end and its speed", "no --model given")
	} else {
		checkModel(report, *model, *steps)
	}
	report.Finish()
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

// reorderFlags moves the backend name after the flags, so both
// `selftest metal --model D` and `selftest --model D metal` parse.
func reorderFlags(args []string) []string {
	if len(args) > 0 && args[0] == "metal" {
		return append(args[1:], "metal")
	}
	return args
}

// checkModel adds the model checks: the reference comparison (when the directory has
// reference.safetensors) with pistil check's default tolerances, then speed.
func checkModel(r *metal.Report, dir string, steps int) {
	ctx := context.Background()
	if ref, err := verify.LoadReference(filepath.Join(dir, "reference.safetensors")); err != nil {
		r.Skip("the model against its reference (pistil check)", err.Error())
	} else {
		m, err := exec.Open(dir, exec.Options{Backend: "metal", AllLogits: true})
		if err == nil {
			var rep *verify.Report
			if rep, err = verify.Run(ctx, m, ref, verify.Options{}); err == nil {
				switch {
				case rep.MaxAbsErr > 2e-3:
					err = fmt.Errorf("max abs logit error %.3g > 2e-3", rep.MaxAbsErr)
				case rep.Top1Agree < 1:
					err = fmt.Errorf("top-1 agreement %.4f < 1", rep.Top1Agree)
				case !rep.GreedyMatch:
					err = fmt.Errorf("the greedy continuation differs from the reference")
				}
				r.Add("the model against its reference (pistil check)", err, fmt.Sprintf("max abs error %.3g, top-1 agreement %.4f", rep.MaxAbsErr, rep.Top1Agree))
				err = nil
			}
			m.Close()
		}
		if err != nil {
			r.Add("the model against its reference (pistil check)", err, "")
		}
	}
	m, err := exec.Open(dir, exec.Options{Backend: "metal"})
	if err != nil {
		r.Add("open the model for timing", err, "")
		return
	}
	defer m.Close()
	chunk := m.Chunk()
	s, err := m.NewSession(chunk + steps + 1)
	if err != nil {
		r.Add("open a session for timing", err, "")
		return
	}
	defer s.Close()
	prompt := make([]int32, chunk)
	for i := range prompt {
		prompt[i] = int32(i % 100)
	}
	start := time.Now()
	if err := s.Prefill(ctx, prompt, exec.PrefillOptions{}); err != nil {
		r.Add("prefill for timing", err, "")
		return
	}
	prefill := time.Since(start)
	start = time.Now()
	for i := 0; i < steps; i++ {
		if err := s.Decode(ctx, int32(i%100)); err != nil {
			r.Add("decode for timing", err, "")
			return
		}
	}
	decode := time.Since(start)
	r.Speed = map[string]float64{
		fmt.Sprintf("prefill_tok_s_%d_tokens_cold", chunk): float64(chunk) / prefill.Seconds(),
		fmt.Sprintf("decode_tok_s_%d_steps", steps):        float64(steps) / decode.Seconds(),
	}
}
