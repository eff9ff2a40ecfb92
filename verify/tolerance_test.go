package verify

import (
	"strings"
	"testing"
)

// Each part of a tolerance fails a report that breaks it and only that part, the int8
// bound holds no max abs error, and an unknown name is an error listing the names.
func TestToleranceFailures(t *testing.T) {
	exact, err := LookupTolerance("exact")
	if err != nil {
		t.Fatal(err)
	}
	int8, err := LookupTolerance("int8")
	if err != nil {
		t.Fatal(err)
	}
	good := Report{MaxAbsErr: 1e-4, Top1Agree: 1, EnginePPL: 10, ReferencePPL: 10, GreedyMatch: true}
	if f := exact.Failures(&good); len(f) != 0 {
		t.Fatalf("a matching report fails exact: %v", f)
	}
	cases := []struct {
		edit func(r *Report)
		want string
	}{
		{func(r *Report) { r.MaxAbsErr = 0.01 }, "max abs error"},
		{func(r *Report) { r.Top1Agree = 0.99 }, "top-1 agreement"},
		{func(r *Report) { r.EnginePPL = 10.2 }, "perplexity ratio"},
		{func(r *Report) { r.EnginePPL = 9.8 }, "perplexity ratio"}, // the inverse bound
		{func(r *Report) { r.GreedyMatch = false }, "greedy"},
	}
	for _, c := range cases {
		r := good
		c.edit(&r)
		if f := exact.Failures(&r); len(f) != 1 || !strings.Contains(f[0], c.want) {
			t.Errorf("exact on a report with a bad %s: %v", c.want, f)
		}
	}
	loose := Report{MaxAbsErr: 9.9, Top1Agree: 0.8, EnginePPL: 8.2, ReferencePPL: 10}
	if f := int8.Failures(&loose); len(f) != 0 {
		t.Errorf("int8 on a report within its bound: %v", f)
	}
	loose.Top1Agree = 0.6
	if f := int8.Failures(&loose); len(f) != 1 || !strings.Contains(f[0], "top-1") {
		t.Errorf("int8 at 60%% top-1: %v", f)
	}
	if !strings.Contains(int8.String(), "max abs error not held") {
		t.Errorf("int8's description does not say max abs is not held: %s", int8)
	}
	bf16KV, err := LookupTolerance("bf16-kv")
	if err != nil {
		t.Fatal(err)
	}
	rounded := Report{MaxAbsErr: 0.037, Top1Agree: 1, EnginePPL: 9.995, ReferencePPL: 10, GreedyMatch: true}
	if f := bf16KV.Failures(&rounded); len(f) != 0 {
		t.Errorf("bf16-kv on its measured error: %v", f)
	}
	if f := exact.Failures(&rounded); len(f) != 1 || !strings.Contains(f[0], "max abs error") {
		t.Errorf("exact on bf16-kv's measured error: %v", f)
	}
	rounded.MaxAbsErr = 0.2
	if f := bf16KV.Failures(&rounded); len(f) != 1 || !strings.Contains(f[0], "max abs error") {
		t.Errorf("bf16-kv at a max abs error of 0.2: %v", f)
	}
	// int16 holds its measured worst case (the fixture's one rerouted token) and fails
	// int8's: agreement below 90%, or a perplexity ratio of int8's size.
	int16, err := LookupTolerance("int16")
	if err != nil {
		t.Fatal(err)
	}
	rerouted := Report{MaxAbsErr: 4.48, Top1Agree: 0.9464, EnginePPL: 9.8557, ReferencePPL: 10, GreedyMatch: true}
	if f := int16.Failures(&rerouted); len(f) != 0 {
		t.Errorf("int16 on its measured worst case: %v", f)
	}
	int8Measured := Report{MaxAbsErr: 9.9, Top1Agree: 0.7788, EnginePPL: 8.4318, ReferencePPL: 10, GreedyMatch: true}
	if f := int16.Failures(&int8Measured); len(f) != 2 || !strings.Contains(f[0], "top-1") || !strings.Contains(f[1], "perplexity") {
		t.Errorf("int16 on int8-all's measured figures: %v", f)
	}
	if _, err := LookupTolerance("int4"); err == nil || !strings.Contains(err.Error(), "exact, int8, int16, bf16-kv") {
		t.Errorf("unknown tolerance: %v", err)
	}
}
