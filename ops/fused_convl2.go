package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// conv1d_silu_l2 is the Gated DeltaNet's short conv with its SiLU and the L2 norms of the
// q and k heads cut from its output (the fuse-conv-l2 pass): on a GPU the norms run in the
// conv kernel's epilogue, where a decode group already holds whole heads of the conv's
// output, instead of a stage of their own. The conv output is still written whole: the v
// heads are read from it in place (slice-views).
//
// Its result is (y, q, k, state'): the updated state last, as every state update's is.
func init() {
	registerFused(&Info{
		OpDef: graph.OpDef{Name: "conv1d_silu_l2",
			Doc: "(y, l2(y[:, q_start:q_end]), l2(y[:, k_start:k_end]), state') for (y, state') = conv1d_silu(x, state, w) " +
				"{q_start, q_end, k_start, k_end, shape, q_eps, q_scale, k_eps, k_scale}: the conv with the q and k heads' L2 norms (shape: their heads)",
			Args:  3,
			Attrs: convL2Attrs,
			Flags: graph.StateUpdate},
		Ref: refConv1DSiLUL2,
		ExpandTuple: func(b *graph.Builder, v *graph.Value) []*graph.Value {
			a := v.Attrs
			c := selectAll(b, b.Named("conv1d_silu", v.Name, nil, v.Args...), 2)
			norm := func(part string) *graph.Value {
				return b.Named("slice_l2_norm", v.Name+"."+part, graph.Attrs{
					"axis": int64(1), "start": a[part+"_start"], "end": a[part+"_end"], "shape": a["shape"],
					"eps": a[part+"_eps"], "scale": a[part+"_scale"]}, c[0])
			}
			return []*graph.Value{c[0], norm("q"), norm("k"), c[1]}
		},
	})
}

var convL2Attrs = []string{"q_start", "q_end", "k_start", "k_end", "shape", "q_eps", "q_scale", "k_eps", "k_scale"}

// refConv1DSiLUL2 runs conv1d_silu, then each part's slice and norm as slice_l2_norm
// does (the same sums in the same order), so the fused and unfused graphs agree to the bit.
func refConv1DSiLUL2(env *Env, v *graph.Value, in, out []*Tensor) error {
	y, q, k, state := out[0], out[1], out[2], out[3]
	if err := refConv1DSiLU(env, v, in, []*Tensor{y, state}); err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		dst  *Tensor
	}{{"q", q}, {"k", k}} {
		if err := l2NormPart(env, y, p.dst, v.Attrs.Int(p.name+"_start"), v.Attrs.Int(p.name+"_end"),
			float32(v.Attrs.Float(p.name+"_eps")), float32(v.Attrs.Float(p.name+"_scale"))); err != nil {
			return fmt.Errorf("conv1d_silu_l2 %s heads: %w", p.name, err)
		}
	}
	return nil
}

// l2NormPart writes channels [start, end) of every row of y [T, Ch] into dst [T, H, D]
// with each head of D normed: the copy and the norm in one pass over each head (the same
// values summed by the same dot as a norm over the copied head, so the same bits), the
// heads of a prefill chunk split over the workers.
func l2NormPart(env *Env, y, dst *Tensor, start, end int, eps, scale float32) error {
	T, Ch := y.Shape[0], y.Shape[1]
	D := dst.Shape[len(dst.Shape)-1]
	if start < 0 || end > Ch || end <= start || D <= 0 || (end-start)%D != 0 || len(dst.F32()) != T*(end-start) {
		return fmt.Errorf("channels [%d, %d) of %v do not fill heads %v", start, end, y.Shape, dst.Shape)
	}
	ys, d := y.F32(), dst.F32()
	w := end - start
	H := w / D
	norm := func(lo, hi int) {
		for h := lo; h < hi; h++ {
			t, i := h/H, h%H
			src := ys[t*Ch+start+i*D : t*Ch+start+(i+1)*D]
			hr := d[h*D : (h+1)*D]
			scaleRow(env, hr, src, nil, float32(1/math.Sqrt(float64(dot(src, src)+eps))), scale)
		}
	}
	if T < l2NormParallelTokens {
		norm(0, T*H) // a decode step's few heads: a parallel region would cost more
		return nil
	}
	parallelRange(env, T*H, norm)
	return nil
}

// l2NormParallelTokens is the fewest tokens whose heads l2NormPart splits over the workers.
const l2NormParallelTokens = 8
