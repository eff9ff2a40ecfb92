package emu

import (
	"sort"
	"testing"

	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/pipeline"
)

// noKernel are the ops a plan holds that never become a kernel launch.
var noKernel = map[string]bool{"input": true, "weight": true, "state": true, "reshape": true, "select": true, "last_row": true}

// Every op of the tiny golden model's decode and prefill plans, with every fusion on and
// with -O0, has an emulator case: the emulated kernels cover both plans.
func TestCasesCoverThePlans(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range cases() {
		covered[c.op] = true
	}
	ck, err := checkpoint.Open(fixtures.Golden("mlx-q4"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	g, err := qwen35moe.Build(ck.Config(), qwen35moe.BuildOptions{WeightType: ck.WeightType, KVDType: graph.F32, ConvStateDType: graph.F32})
	if err != nil {
		t.Fatal(err)
	}
	full, err := pipeline.Default().PassConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := map[string][]string{}
	for _, cfg := range []struct {
		name string
		c    passes.Config
	}{{"default", full}, {"-O0", passes.O0()}} {
		for _, phase := range []passes.Phase{{Name: "decode", Tokens: 1}, {Name: "prefill", Tokens: 64, LastLogitsOnly: true}} {
			p, err := passes.Compile(g, ops.Default, phase, cfg.c)
			if err != nil {
				t.Fatalf("%s %s: %v", cfg.name, phase.Name, err)
			}
			for _, d := range p.Dispatches {
				if !noKernel[d.Op] && !covered[d.Op] {
					missing[d.Op] = append(missing[d.Op], cfg.name+" "+phase.Name)
				}
			}
		}
	}
	ops := make([]string, 0, len(missing))
	for op := range missing {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		t.Errorf("op %s (in the %v plans) has no emulator case", op, uniq(missing[op]))
	}
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
