package passes_test

import (
	"fmt"
	"testing"

	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/plan"
)

// TestEarlyStateReadersAreTheirStatesOnlyWriters pins down what gated_delta and conv1d
// rely on when they read their recurrent and conv states before the programmatic-launch
// wait (KERNEL_EARLY): no other dispatch of a CUDA plan writes the state bytes such a
// kernel reads, so the last writer is the same dispatch one step (one graph launch)
// earlier. Decode and prefill plans, with the defaults and with the passes that change
// who touches the states (the GDN prologue in the recurrent step with its conv_state_shift,
// the gated norm in the step, every optional pass off).
func TestEarlyStateReadersAreTheirStatesOnlyWriters(t *testing.T) {
	for _, layout := range []string{"mlx-q4", "hf"} {
		ck := openTiny(t, layout)
		g := buildTiny(t, ck, false)
		configs := map[string]passes.Config{
			"defaults":             {},
			"fuse-gdn-prologue on": {Off: map[string]bool{"fuse-gdn-prologue": false}},
			"fuse-delta-norm on":   {Off: map[string]bool{"fuse-delta-norm": false}},
			"optional passes off":  passes.O0(),
		}
		for name, cfg := range configs {
			for _, phase := range []passes.Phase{
				{Name: "decode", Tokens: 1, Backend: "cuda"},
				{Name: "prefill", Tokens: 7, LastLogitsOnly: true, Backend: "cuda"},
			} {
				t.Run(fmt.Sprintf("%s/%s/%s", layout, name, phase.Name), func(t *testing.T) {
					p, err := passes.Compile(g, ops.Default, phase, cfg)
					if err != nil {
						t.Fatal(err)
					}
					readers, early := 0, 0
					for i, d := range p.Dispatches {
						if d.Kernel != kernels.KernelGatedDelta && d.Kernel != kernels.KernelConv1D {
							continue
						}
						early++
						for _, a := range d.Args {
							if p.Buffers[a.Buffer].Kind != plan.State {
								continue
							}
							readers++
							for j, o := range p.Dispatches {
								for _, w := range o.Writes {
									if j != i && w.Buffer == a.Buffer {
										t.Errorf("dispatch %d (%s) writes %s, which dispatch %d (%s) reads before its wait", j, o.Op, p.Buffers[a.Buffer].Name, i, d.Kernel)
									}
								}
							}
						}
					}
					if readers < early || (name == "defaults" && early == 0) {
						t.Errorf("%d state operands of %d gated_delta and conv1d dispatches", readers, early)
					}
				})
			}
		}
	}
}
