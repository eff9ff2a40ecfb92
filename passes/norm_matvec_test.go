package passes_test

import (
	"math/rand"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/passes"
)

// norm-matvec folds a CUDA decode step's post-attention norms into the routers' q8
// projections, and norm-matvec-q4 the rest into the q4 projections that read them: every
// layer's input norm but the first (a plain rms_norm of the embedding) into its input
// projections, and the final norm into the lm_head. The graph computes the same bits
// (the fused op's reference is add_rms_norm, then the projections), prefill steps and
// the CPU and Metal targets are left alone, and with staged-matvec off norm-matvec-q4
// takes nothing (the q4 form runs only on the staged twins).
func TestNormMatvecKeepsTheAnswer(t *testing.T) {
	ck := openTiny(t, "mlx-q4")
	g := buildTiny(t, ck, false)
	layers := len(ck.Config().Layers)
	decode := func(backend string) passes.Phase {
		return passes.Phase{Name: "decode", Tokens: 1, Backend: backend}
	}
	const last = "norm-matvec-q4"
	routers := runUntil(t, g, decode("cuda"), passes.Config{}, last)
	fused := runUntil(t, g, decode("cuda"), passes.Config{Off: map[string]bool{"norm-matvec-q4": false}}, last)
	plain := runUntil(t, g, decode("cuda"), passes.Config{Off: map[string]bool{"norm-matvec": true}}, last)
	if n := countOps(routers.Graph, "add_rms_norm_matmuls"); n != layers {
		t.Errorf("cuda decode, the defaults: %d add_rms_norm_matmuls, want the %d routers'", n, layers)
	}
	want := (layers - 1) + layers + 1
	if n := countOps(fused.Graph, "add_rms_norm_matmuls"); n != want {
		t.Errorf("cuda decode with norm-matvec-q4: %d add_rms_norm_matmuls, want %d (the input norms of layers 1..%d, %d routers, the lm_head)", n, want, layers-1, layers)
	}
	if n, m := countOps(fused.Graph, "add_rms_norm"), countOps(plain.Graph, "add_rms_norm"); n != 0 || m != 2*layers {
		t.Errorf("cuda decode: %d add_rms_norm left with both passes, %d without; want 0 and %d (every layer's two but the first input norm, and the final norm)", n, m, 2*layers)
	}
	// The routers' rows are read by the experts beside them; the projections' and the
	// lm_head's by nothing else, so their kernels are told not to write them.
	unread := 0
	for _, v := range fused.Graph.Values {
		if v.Op == "add_rms_norm_matmuls" && v.Attrs.Bool(gpu.AttrNormRowUnread) {
			unread++
		}
	}
	if unread != layers {
		t.Errorf("cuda decode: %d add_rms_norm_matmuls marked %s, want %d (every one but the routers')", unread, gpu.AttrNormRowUnread, layers)
	}
	rng := rand.New(rand.NewSource(11))
	bind := graph.Bindings{T: 1, C: 3, N: 8}
	tokens := randomTokens(rng, 1, ck.Config().VocabSize)
	states := zeroStates(g, bind)
	compareOutputs(t, "norm-matvec", interpret(t, fused.Graph, ck, tokens, states, bind), interpret(t, plain.Graph, ck, tokens, states, bind), 0)

	noStaged := runUntil(t, g, decode("cuda"), passes.Config{Off: map[string]bool{"staged-matvec": true, "norm-matvec-q4": false}}, last)
	if n := countOps(noStaged.Graph, "add_rms_norm_matmuls"); n != layers {
		t.Errorf("cuda decode with staged-matvec off: %d add_rms_norm_matmuls, want the %d routers' only", n, layers)
	}
	for _, c := range []struct {
		what  string
		phase passes.Phase
	}{
		{"cpu decode", decode("cpu")},
		{"metal decode", decode("metal")},
		{"cuda prefill", passes.Phase{Name: "prefill", Tokens: 4, LastLogitsOnly: true, Backend: "cuda"}},
	} {
		if n := countOps(runUntil(t, g, c.phase, passes.Config{Off: map[string]bool{"norm-matvec-q4": false}}, last).Graph, "add_rms_norm_matmuls"); n != 0 {
			t.Errorf("%s: %d add_rms_norm_matmuls, want none", c.what, n)
		}
	}
}
