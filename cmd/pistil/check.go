package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

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
	tolName := fs.String("tolerance", verify.Tolerances[0].Name, "the named bound to hold the logits to: "+toleranceNames()+" (the flags below override its parts)")
	maxAbs := fs.Float64("max-abs", 0, "fail when the largest absolute logit error exceeds this (0: none)")
	minTop1 := fs.Float64("min-top1", 0, "fail when the top-1 agreement fraction is below this")
	maxPPL := fs.Float64("max-ppl-ratio", 0, "fail when engine/reference perplexity exceeds this (or its inverse)")
	greedy := fs.Bool("greedy", false, "fail when the greedy continuation differs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *refPath == "" {
		return errors.New("--reference FILE is required")
	}
	tol, err := verify.LookupTolerance(*tolName)
	if err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-abs":
			tol.MaxAbsErr = *maxAbs
		case "min-top1":
			tol.MinTop1 = *minTop1
		case "max-ppl-ratio":
			tol.MaxPPLRatio = *maxPPL
		case "greedy":
			tol.Greedy = *greedy
		}
	})
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
	fmt.Printf("tolerance        %s\n", tol)
	if fails := tol.Failures(rep); len(fails) > 0 {
		return fmt.Errorf("FAIL: %v", fails)
	}
	fmt.Println("PASS")
	return nil
}

func toleranceNames() string {
	var names []string
	for _, t := range verify.Tolerances {
		names = append(names, t.Name)
	}
	return strings.Join(names, ", ")
}
