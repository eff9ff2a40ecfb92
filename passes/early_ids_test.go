package passes_test

import (
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// TestEarlyExpertIdsMarksOnlyWhatWaitedFor: on a CUDA decode step every combine of the
// tiny model is marked, and for each the dispatches that write its ids and routing weights
// reach one of its direct predecessors through the plan's edges (the property the kernel's
// early reads rely on, checked here from the edges, not from the pass's code); with
// fuse-expert-routing the experts' gate/up kernel writes the ids and is the combine's
// direct predecessor, so none is marked; nor with the pass off, nor on Metal or the CPU.
func TestEarlyExpertIdsMarksOnlyWhatWaitedFor(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, false)
	layers := len(ck.Config().Layers)
	compile := func(backend string, off map[string]bool) *plan.Plan {
		p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1, Backend: backend}, passes.Config{Check: true, Off: off})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	marked := func(p *plan.Plan) []int {
		var ids []int
		for i, d := range p.Dispatches {
			if d.Attrs.Bool(gpu.AttrIdsEarly) {
				ids = append(ids, i)
			}
		}
		return ids
	}
	p := compile("cuda", nil)
	if got := marked(p); len(got) != layers || countPlanOps(p, "expert_matmul_combine_shared") != layers {
		t.Fatalf("cuda decode: %d combines marked of %d, want all %d layers'", len(got), countPlanOps(p, "expert_matmul_combine_shared"), layers)
	}
	preds := map[int][]int{}
	for _, e := range p.Edges {
		preds[e.To] = append(preds[e.To], e.From)
	}
	reaches := func(from, to int) bool { // a path of edges from -> ... -> to
		seen := map[int]bool{}
		stack := []int{to}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, a := range preds[n] {
				if a == from {
					return true
				}
				if !seen[a] {
					seen[a] = true
					stack = append(stack, a)
				}
			}
		}
		return false
	}
	for _, i := range marked(p) {
		d := p.Dispatches[i]
		for _, arg := range []int{2, 3} { // ids, routing weights
			o := d.Args[arg]
			writers := 0
			for j := 0; j < i; j++ {
				for _, w := range p.Dispatches[j].Writes {
					if w.Buffer != o.Buffer || w.End <= o.Offset || w.Off >= o.Offset+o.Type.Bytes(graph.Bindings{}) {
						continue
					}
					writers++
					behind := false
					for _, q := range preds[i] {
						behind = behind || (q != j && reaches(j, q))
					}
					if !behind {
						t.Errorf("dispatch %d (%s) is marked, but %d (%s), which writes its arg %d, is not behind one of its predecessors %v", i, d.Op, j, p.Dispatches[j].Op, arg, preds[i])
					}
				}
			}
			if writers == 0 {
				t.Errorf("dispatch %d: nothing before it writes its arg %d", i, arg)
			}
		}
	}
	for _, c := range []struct {
		what    string
		backend string
		off     map[string]bool
	}{
		{"cuda decode, fuse-expert-routing on", "cuda", map[string]bool{"fuse-expert-routing": false}},
		{"cuda decode, early-expert-ids off", "cuda", map[string]bool{"early-expert-ids": true}},
		{"metal decode", "metal", nil},
		{"cpu decode", "cpu", nil},
	} {
		q := compile(c.backend, c.off)
		if got := marked(q); len(got) != 0 {
			t.Errorf("%s: %d dispatches marked %s, want none", c.what, len(got), gpu.AttrIdsEarly)
		}
		if n := countPlanOps(q, "expert_matmul_combine_shared"); c.backend == "cuda" && n != layers {
			t.Errorf("%s: %d expert_matmul_combine_shared, want %d (so that the test says something)", c.what, n, layers)
		}
	}
}
