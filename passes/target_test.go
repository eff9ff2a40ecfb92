package passes_test

import (
	"fmt"
	"slices"
	"testing"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
)

// Every dispatch of every GPU plan names a kernel of ops/kernels, with a grid and a
// group size: the plan says what runs. Covered: the tiny golden configs (both layouts)
// and the built-in 35B-A3B, decode and prefill chunks of several sizes, with every pass
// and with the required passes only. CPU plans name no kernel (the op references run).
func TestGPUPlansNameExistingKernels(t *testing.T) {
	builtin := qwen35moe.Default()
	graphs := map[string]*graph.Graph{
		"tiny hf":     tinyGraph(t, "hf"),
		"tiny mlx-q4": tinyGraph(t, "mlx-q4"),
	}
	g, err := qwen35moe.Build(builtin, qwen35moe.BuildOptions{WeightType: qwen35moe.MLXWeightType(builtin)})
	if err != nil {
		t.Fatal(err)
	}
	graphs["built-in 35B-A3B"] = g
	for name, g := range graphs {
		for _, target := range passes.TargetNames() {
			// The default switches, -O0, and every optional pass on (the passes that are
			// off by default, such as tensor-cores, included).
			for _, mode := range []string{"default", "O0", "all-on"} {
				cfg := passes.Config{}
				switch mode {
				case "O0":
					cfg = passes.O0()
				case "all-on":
					if err := cfg.ApplyFlag("all/on"); err != nil {
						t.Fatal(err)
					}
				}
				tokens := []int{1, 7, 512}
				if name != "built-in 35B-A3B" {
					tokens = []int{1, 2, 7, 64}
				}
				for _, T := range tokens {
					ph := passes.Phase{Name: "prefill", Tokens: T, LastLogitsOnly: true, Backend: target}
					if T == 1 {
						ph = passes.Phase{Name: "decode", Tokens: 1, Backend: target}
					}
					t.Run(fmt.Sprintf("%s/%s/%s/T=%d", name, target, mode, T), func(t *testing.T) {
						p, err := passes.Compile(g, ops.Default, ph, cfg)
						if err != nil {
							t.Fatal(err)
						}
						if p.Backend != target {
							t.Errorf("plan says backend %q", p.Backend)
						}
						tg, _ := passes.TargetFor(target)
						for _, d := range p.Dispatches {
							switch {
							case tg.GPU == nil && d.Kernel != "":
								t.Errorf("cpu dispatch %d (%s) names kernel %s", d.Index, d.Op, d.Kernel)
							case tg.GPU != nil && !slices.Contains(kernels.NamesFor(target), d.Kernel):
								t.Errorf("dispatch %d (%s %s) names kernel %q, not one of ops/kernels", d.Index, d.Op, d.Label, d.Kernel)
							case tg.GPU != nil && (d.Block < 32 || d.Block > 1024 || d.Block%32 != 0 || d.Grid[0] < 1 || d.Grid[1] < 1 || d.Grid[2] < 1):
								t.Errorf("dispatch %d (%s) launches grid %v of %d threads", d.Index, d.Op, d.Grid, d.Block)
							}
						}
					})
				}
			}
		}
	}
}

// The targets' state types are the ones the graph is declared with: a plan shows them.
func TestTargetsNameTheirStateTypes(t *testing.T) {
	for _, name := range passes.TargetNames() {
		tg, err := passes.TargetFor(name)
		if err != nil {
			t.Fatal(err)
		}
		if tg.KVDType == graph.InvalidDType || tg.ConvStateDType == graph.InvalidDType {
			t.Errorf("target %s leaves a state type unset", name)
		}
	}
	if _, err := passes.TargetFor("tpu"); err == nil {
		t.Error("an unknown target was accepted")
	}
}
