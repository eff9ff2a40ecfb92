package passes

import (
	"pistil/gpu"
	"pistil/graph"
)

// tileAttention, for a GPU target, asks for the tiled prefill kernel (attention_prefill:
// one group per kv head and tile of query tokens, each K/V tile shared by every query
// row of the group) for attention steps of more than one token where it applies. It
// marks the attention value with gpu.AttrPrefillTiled; split-attention, which runs
// after it, carries the mark onto attention_partial and sizes the key split from the
// kernel's query tiles. The lowering picks the kernel from the mark, so the plan's
// kernel names say what runs. Off, prefill attention runs one group per (kv head,
// token), reading the cache once per token (and decode is the same either way).
func tileAttention(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil {
		return err
	}
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	for _, v := range u.Graph.Values {
		if v.Op != "attention" || v.Attrs.Int(gpu.AttrPrefillTiled) != 0 {
			continue
		}
		q, k := v.Args[0].Type.Shape.Eval(bind), v.Args[1].Type.Shape.Eval(bind)
		if len(q) != 3 || len(k) != 3 || !t.GPU.TiledPrefillAttention(q[0], q[1], k[1], q[2]) {
			continue
		}
		attrs := graph.Attrs{}
		for key, val := range v.Attrs {
			attrs[key] = val
		}
		attrs[gpu.AttrPrefillTiled] = int64(1)
		v.Attrs = attrs
		u.count("tile-attention: attention_prefill", 1)
	}
	return nil
}
