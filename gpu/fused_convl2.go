package gpu

import (
	"fmt"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// conv1d_silu_l2 (the fuse-conv-l2 pass): the conv kernel with the q and k heads' L2
// norms in its epilogue. It covers a decode step, whose groups are whole runs of channels
// (kernels.Conv1DGeometry: one token, 4 x 32 channels a group), when every head lies in
// one group in whole SIMD groups: the head dim a multiple of the SIMD width that divides
// the group's channels, each part starting at a multiple of it, and the two parts apart.
// Anything else (prefill's groups of 32 channels x slices of the tokens, heads that
// straddle groups) expands into conv1d_silu and the two slice_l2_norms.

// convL2Heads gives the parts' channel ranges and head dim when the kernel covers them.
func convL2Heads(attrs graph.Attrs, in, out []Operand) (qs, ks, width, D int, ok bool) {
	x, q, k := in[0], out[1], out[2]
	if len(x.Shape) != 2 || x.Shape[0] != 1 || len(q.Shape) != 3 || len(k.Shape) != 3 {
		return 0, 0, 0, 0, false
	}
	Ch := x.Shape[1]
	_, threads, slices := kernels.Conv1DGeometry(1, Ch)
	D = q.Shape[2]
	qs, ks = attrs.Int("q_start"), attrs.Int("k_start")
	width = q.Shape[1] * D
	ok = slices == 1 && D > 0 && D%kernels.SIMDWidth == 0 && threads%D == 0 && qs%D == 0 && ks%D == 0 &&
		k.Shape[1]*k.Shape[2] == width && k.Shape[2] == D &&
		attrs.Int("q_end") == qs+width && attrs.Int("k_end") == ks+width &&
		qs >= 0 && ks >= 0 && qs+width <= Ch && ks+width <= Ch && (qs+width <= ks || ks+width <= qs)
	return qs, ks, width, D, ok
}

func supportsConvSiLUL2(attrs graph.Attrs, in, out []Operand) bool {
	_, _, _, _, ok := convL2Heads(attrs, in, out)
	return ok
}

func lowerConvSiLUL2(c *ctx, d *plan.Dispatch, in, out []Operand) (*Launch, error) {
	qs, ks, width, D, ok := convL2Heads(d.Attrs, in, out)
	if !ok {
		return nil, fmt.Errorf("conv1d_silu_l2: x %v with q heads %v at %d and k heads %v at %d: not a decode step of whole heads the conv's groups hold; the plan should have expanded it",
			in[0].Shape, out[1].Shape, d.Attrs.Int("q_start"), out[2].Shape, d.Attrs.Int("k_start"))
	}
	l, err := lowerConv1D(c, d, in, []Operand{out[0], out[3]})
	if err != nil {
		return nil, err
	}
	a := l.Args.(*kernels.Conv1DArgs)
	a.SiLU = 1
	a.QOut, a.KOut, a.QStart, a.KStart = out[1].Addr, out[2].Addr, int32(qs), int32(ks)
	a.NormWidth, a.HeadDim = int32(width), int32(D)
	a.QEps, a.QScale = float32(d.Attrs.Float("q_eps")), float32(d.Attrs.Float("q_scale"))
	a.KEps, a.KScale = float32(d.Attrs.Float("k_eps")), float32(d.Attrs.Float("k_scale"))
	return l, nil
}
