package emu

import (
	"fmt"
	"sort"
	"testing"

	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/metal/kernelcheck"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/pipeline"
)

// noKernel are the ops a plan holds that never become a kernel launch.
var noKernel = map[string]bool{"input": true, "weight": true, "state": true, "reshape": true, "select": true, "last_row": true}

// Every op of the tiny golden model's decode and prefill plans, with every fusion on and
// with -O0, compiled for the CPU and for Metal, has an emulator case, and every kernel the
// Metal plans launch is launched by one: the emulated kernels cover both plans.
func TestCasesCoverThePlans(t *testing.T) {
	covered, launched := map[string]bool{}, map[string]bool{}
	for _, c := range kernelcheck.Cases() {
		covered[c.Op()] = true
	}
	for _, k := range kernelsOfCases(t) {
		launched[k] = true
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
		for _, backend := range []string{"", "metal"} {
			for _, phase := range []passes.Phase{{Name: "decode", Tokens: 1, Backend: backend}, {Name: "prefill", Tokens: 64, LastLogitsOnly: true, Backend: backend}} {
				p, err := passes.Compile(g, ops.Default, phase, cfg.c)
				if err != nil {
					t.Fatalf("%s %s %s: %v", cfg.name, backend, phase.Name, err)
				}
				where := fmt.Sprintf("%s %s %s", cfg.name, phase.Name, map[string]string{"": "cpu", "metal": "metal"}[backend])
				for _, d := range p.Dispatches {
					if !noKernel[d.Op] && !covered[d.Op] {
						missing[d.Op] = append(missing[d.Op], where)
					}
					if backend == "metal" && !launched[d.Kernel] {
						missing["kernel "+d.Kernel] = append(missing["kernel "+d.Kernel], where)
					}
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
		t.Errorf("%s (in the %v plans) has no emulator case", op, uniq(missing[op]))
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
