package passes_test

import (
	"testing"

	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/passes"
)

// router-matvec keeps a CUDA decode plan's matmul_routers whole as router_q8 (the
// mlx-q4 fixture's router gates are q8), one dispatch and one stage fewer per MoE layer
// than with it off; Metal, prefill and the hf layout's bf16 gates keep matvec_q8 and
// router. norm-matvec is off here: on, it folds the norm before the router into the
// router's projection when router-matvec leaves that a qmatmul, which takes the same
// stage out the other way.
func TestRouterMatvec(t *testing.T) {
	count := func(layout, backend string, tokens int, off bool) (routerQ8, dispatches, groups int) {
		t.Helper()
		ph := passes.Phase{Name: "decode", Tokens: tokens, Context: 64, Backend: backend}
		if tokens > 1 {
			ph.Name, ph.LastLogitsOnly = "prefill", true
		}
		p, err := passes.Compile(tinyGraph(t, layout), ops.Default, ph, passes.Config{Off: map[string]bool{"router-matvec": off, "norm-matvec": true}})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Dispatches {
			if d.Kernel == kernels.KernelRouterQ8 {
				routerQ8++
			}
		}
		return routerQ8, len(p.Dispatches), len(p.Groups)
	}
	const moeLayers = 8 // the tiny fixture's layers, each ending in the MoE block
	on, dOn, gOn := count("mlx-q4", "cuda", 1, false)
	off, dOff, gOff := count("mlx-q4", "cuda", 1, true)
	if on != moeLayers || off != 0 || dOff-dOn != moeLayers || gOff-gOn != moeLayers {
		t.Errorf("cuda decode: %d router_q8 in %d dispatches, %d groups with router-matvec; %d in %d, %d without (want %d and 0, %d fewer of each)",
			on, dOn, gOn, off, dOff, gOff, moeLayers, moeLayers)
	}
	for _, c := range []struct {
		layout, backend string
		tokens          int
	}{{"mlx-q4", "metal", 1}, {"mlx-q4", "cuda", 8}, {"hf", "cuda", 1}} {
		n, d, g := count(c.layout, c.backend, c.tokens, false)
		_, dOff, gOff := count(c.layout, c.backend, c.tokens, true)
		if n != 0 || d != dOff || g != gOff {
			t.Errorf("%s %s T=%d: %d router_q8, %d dispatches / %d groups against %d / %d with router-matvec off (want none, the same plan)",
				c.layout, c.backend, c.tokens, n, d, g, dOff, gOff)
		}
	}
}
