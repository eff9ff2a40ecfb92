package main

import (
	"context"
	"errors"
	"fmt"

	"pistil/verify"
)

func init() {
	register(command{name: "check", summary: "compare the engine's logits with a reference file", run: runCheck})
}

func runCheck(args []string) error {
	fs := newFlags("check")
	var mf modelFlags
	mf.register(fs)
	refPath := fs.String("reference", "", "reference.safetensors (tokens, logits, gen_tokens, gen_logits)")
	decodeFrom := fs.Int("decode-from", 0, "prefill this many tokens, then feed the rest through the decode plan")
	maxAbs := fs.Float64("max-abs", 2e-3, "fail when the largest absolute logit error exceeds this")
	minTop1 := fs.Float64("min-top1", 1.0, "fail when the top-1 agreement fraction is below this")
	maxPPL := fs.Float64("max-ppl-ratio", 1.01, "fail when engine/reference perplexity exceeds this (or its inverse)")
	greedy := fs.Bool("greedy", true, "fail when the greedy continuation differs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *refPath == "" {
		return errors.New("--reference FILE is required")
	}
	ref, err := verify.LoadReference(*refPath)
	if err != nil {
		return err
	}
	m, err := mf.open(true)
	if err != nil {
		return err
	}
	defer m.Close()
	rep, err := verify.Run(context.Background(), m, ref, verify.Options{DecodeFrom: *decodeFrom})
	if err != nil {
		return err
	}
	fmt.Print(rep)
	var fails []string
	if rep.MaxAbsErr > *maxAbs {
		fails = append(fails, fmt.Sprintf("max abs error %.3g > %.3g", rep.MaxAbsErr, *maxAbs))
	}
	if rep.Top1Agree < *minTop1 {
		fails = append(fails, fmt.Sprintf("top-1 agreement %.4f < %.4f", rep.Top1Agree, *minTop1))
	}
	if r := rep.PPLRatio(); r > *maxPPL || 1/r > *maxPPL {
		fails = append(fails, fmt.Sprintf("perplexity ratio %.5f outside [1/%g, %g]", r, *maxPPL, *maxPPL))
	}
	if *greedy && !rep.GreedyMatch {
		fails = append(fails, "greedy continuation differs")
	}
	if len(fails) > 0 {
		return fmt.Errorf("FAIL: %v", fails)
	}
	fmt.Println("PASS")
	return nil
}
