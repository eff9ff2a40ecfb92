package passes_test

import (
	"testing"

	"pistil/graph"
	"pistil/ops"
	"pistil/passes"
)

// The fusion legality rule on hand-made graphs: a value a fusion would absorb must have
// no use outside the pattern (else its work would be done twice); a value a fusion
// replaces may have other uses, which then read the fused op's result.

func onlyPass(name string) passes.Config {
	cfg := passes.Config{Check: true, Off: map[string]bool{}}
	for _, p := range passes.Passes {
		if !p.Required && p.Name != name {
			cfg.Off[p.Name] = true
		}
	}
	return cfg
}

func runOnly(t *testing.T, g *graph.Graph, pass string) *graph.Graph {
	t.Helper()
	u := &passes.Unit{Graph: g.Clone(), Phase: passes.Phase{Name: "decode", Tokens: 1}, Ops: ops.Default}
	if err := passes.Run(u, onlyPass(pass), pass); err != nil {
		t.Fatal(err)
	}
	return u.Graph
}

func f32(dims ...int) graph.Type { return graph.TensorType(graph.F32, graph.S(dims...)...) }

// swigluGraph is silu(x·Wgᵀ) * (x·Wuᵀ), optionally also outputting the gate projection.
func swigluGraph(t *testing.T, exposeGate bool) *graph.Graph {
	b := graph.NewBuilder(graph.New("swiglu"), ops.Default)
	x := b.Source("input", "x", f32(1, 8), nil)
	wg := b.Source("weight", "wg", graph.TensorType(graph.BF16, graph.S(4, 8)...), nil)
	wu := b.Source("weight", "wu", graph.TensorType(graph.BF16, graph.S(4, 8)...), nil)
	gate := b.Op("matmul", nil, x, wg)
	y := b.Op("swiglu", nil, gate, b.Op("matmul", nil, x, wu))
	b.G.AddOutput("y", y)
	if exposeGate {
		b.G.AddOutput("gate", gate)
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	return b.G
}

func TestFusionLegality(t *testing.T) {
	if g := runOnly(t, swigluGraph(t, false), "fuse-swiglu"); countOps(g, "matmul_swiglu") != 1 || countOps(g, "matmul") != 0 {
		t.Errorf("gate/up → swiglu did not fuse:\n%s", graph.Print(g))
	}
	// The gate projection is also an output: fusing would compute it twice.
	if g := runOnly(t, swigluGraph(t, true), "fuse-swiglu"); countOps(g, "matmul_swiglu") != 0 {
		t.Errorf("fused a gate projection that has another use:\n%s", graph.Print(g))
	}

	// add → rms_norm: the sum is replaced (it may have other uses, here an output); a
	// broadcast add is left alone (the fused kernel adds element by element).
	for _, c := range []struct {
		bShape []int
		fuse   bool
	}{{[]int{1, 8}, true}, {[]int{8}, false}} {
		b := graph.NewBuilder(graph.New("addnorm"), ops.Default)
		x := b.Source("input", "x", f32(1, 8), nil)
		r := b.Source("input", "r", f32(c.bShape...), nil)
		w := b.Source("weight", "w", f32(8), nil)
		sum := b.Op("add", nil, x, r)
		b.G.AddOutput("sum", sum)
		b.G.AddOutput("normed", b.Op("rms_norm", graph.Attrs{"eps": 1e-6}, sum, w))
		if b.Err() != nil {
			t.Fatal(b.Err())
		}
		g := runOnly(t, b.G, "fuse-add-norm")
		if got := countOps(g, "add_rms_norm") == 1; got != c.fuse {
			t.Errorf("b %v: fused = %v, want %v:\n%s", c.bShape, got, c.fuse, graph.Print(g))
		}
		if c.fuse && (countOps(g, "add") != 0 || g.Output("sum").Op != graph.OpSelect) {
			t.Errorf("the sum output does not read the fused op:\n%s", graph.Print(g))
		}
	}
}
