package passes

import (
	"fmt"

	"pistil/gpu"
	"pistil/graph"
	"pistil/ops"
	"pistil/ops/kernels"
)

// expandForBackend rewrites every fused op the target has no single kernel for into the
// ops it fuses (its Expand in the op table), so each stage is a dispatch of the plan with
// its own planned scratch, barriers and dependency edges. The CPU runs every op and is
// left as it is.
func expandForBackend(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil {
		return err
	}
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	// An expansion yields primitive ops, but loop in case one yields a fused op; each
	// round removes a fused op, so the loop ends.
	for round := 0; ; round++ {
		if round > 8 {
			return fmt.Errorf("expand-for-backend: expansions did not settle after %d rounds", round)
		}
		r := newRewriter(u, "expand-for-backend")
		users := u.Graph.Users()
		b := graph.NewBuilder(u.Graph, u.Ops)
		expanded := 0
		for _, v := range append([]*graph.Value(nil), u.Graph.Values...) {
			def, ok := u.Ops.Lookup(v.Op)
			if !ok || def.Has(graph.Source) || def.Has(graph.View) {
				continue
			}
			in, out := valueOperands(v, bind)
			if t.GPU.Supports(v.Op, v.Attrs, in, out) {
				continue
			}
			if info, ok := u.Ops.Info(v.Op); !ok || (info.Expand == nil && info.ExpandTuple == nil) {
				return fmt.Errorf("%s (%s): the %s backend has no kernel for it and it is not a fused op that expands", v.Ref(), v.Op, t.Name)
			}
			elems, err := ops.ExpandElems(b, v)
			if err != nil {
				return fmt.Errorf("expand-for-backend: %s: %w", v.Ref(), err)
			}
			if err := b.Err(); err != nil {
				return fmt.Errorf("expand-for-backend: %s: %w", v.Ref(), err)
			}
			if err := replaceExpanded(r, v, elems, users[v.ID]); err != nil {
				return err
			}
			u.count("expand-for-backend: "+v.Op, 1)
			expanded++
		}
		r.finish()
		if expanded == 0 {
			return nil
		}
	}
}

// replaceExpanded makes an expansion's values replace v: the value itself, or for a
// tuple result each select of an element.
func replaceExpanded(r *rewriter, v *graph.Value, elems []*graph.Value, users []*graph.Value) error {
	if len(v.Type.Elems) == 0 {
		return r.replace(v, elems[0])
	}
	r.claimed[v] = true
	for _, s := range users {
		if s.Op != graph.OpSelect || len(s.Args) != 1 || s.Args[0] != v {
			return fmt.Errorf("expand-for-backend: %s uses the tuple %s other than through select", s.Ref(), v.Ref())
		}
		i := s.Attrs.Int("index")
		if i < 0 || i >= len(elems) {
			return fmt.Errorf("expand-for-backend: %s selects element %d of %d", s.Ref(), i, len(elems))
		}
		if err := r.replace(s, elems[i]); err != nil {
			return err
		}
	}
	return nil
}

// stagedDecode says whether a decode attention will run on attention_gqa_staged
// (mma-decode-attention and staged-decode-attention on, a shape it serves): its groups
// stream a range of any length with four key tiles in flight, so the equal ranges that
// fill the GPU once serve every context, where the fixed-block split would launch a grid
// of kernels.AttnMaxRanges ranges, most returning at once, at one group per
// multiprocessor (its group memory).
func stagedDecode(u *Unit, t *Target, v *graph.Value) bool {
	if !u.passOn("mma-decode-attention") || !u.passOn("staged-decode-attention") {
		return false
	}
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	q, k := v.Args[0].Type.Shape.Eval(bind), v.Args[1].Type.Shape.Eval(bind)
	return t.GPU.StagedDecodeAttentionShape(q[0], q[1], k[1], q[2], v.Args[1].Type.DType)
}

// fa2Prefill says whether a tiled prefill attention will run on attention_prefill_fa2
// (mma-attention and fa2-attention on, a bf16 cache and a head dim it serves), whose
// groups are a multiprocessor each and take four times the rows: its key split is its
// own (gpu.Target.FA2AttentionSplits).
func fa2Prefill(u *Unit, t *Target, v *graph.Value) bool {
	if !u.passOn("mma-attention") || !u.passOn("fa2-attention") || !t.GPU.TensorCores {
		return false
	}
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	var operands []gpu.Operand
	for _, a := range v.Args[:3] {
		operands = append(operands, gpu.Operand{DType: a.Type.DType, Shape: a.Type.Shape.Eval(bind)})
	}
	return t.GPU.FA2AttentionShape("attention", operands)
}

// splitAttention, for a GPU target, cuts the keys of attention steps with few (kv head,
// token) pairs (decode) into ranges that separate groups compute concurrently: attention
// becomes attention_partial then attention_merge, two planned dispatches. Off, every
// attention runs as one group per (kv head, token): correct, and slow for decode at long
// context. A decode step cuts its keys into a fixed number of ranges, each longer as the
// context grows, until the context reaches Config.KeyBlockSplitFrom; from there into
// ranges of Config.KeyBlockKeys keys, whose number grows with it (ops.KeyRanges), so a
// long context gets more groups, not longer ones.
func splitAttention(u *Unit) error {
	t, err := TargetFor(u.Phase.Backend)
	if err != nil || t.GPU == nil {
		return err
	}
	r := newRewriter(u, "split-attention")
	bind := graph.Bindings{T: u.Phase.Tokens, N: 1}
	for _, v := range append([]*graph.Value(nil), u.Graph.Values...) {
		if v.Op != "attention" {
			continue
		}
		q, k := v.Args[0].Type.Shape.Eval(bind), v.Args[1].Type.Shape.Eval(bind)
		if len(q) != 3 || len(k) != 3 {
			continue
		}
		splits := t.GPU.AttentionSplits(q[0], q[1], k[1], q[2])
		tiled := v.Attrs.Int(gpu.AttrPrefillTiled) != 0
		if tiled {
			splits = t.GPU.PrefillAttentionSplits(q[0], q[1], k[1], q[2])
			if fa2Prefill(u, t, v) {
				splits = t.GPU.FA2AttentionSplits(q[0], q[1], k[1], q[2])
			}
		}
		if splits < 2 {
			continue
		}
		ranges := ops.KeyRanges{Splits: splits, Block: kernels.AttnKeyBlock}
		if from := u.Config.keyBlockSplitFrom(); from > 0 && q[0] == 1 && !tiled && !stagedDecode(u, t, v) {
			// Decode: a grid of kernels.AttnMaxRanges ranges (128K keys in blocks of 256),
			// those a step does not use returning at once (a CUDA graph replays one grid
			// at every context).
			ranges = ops.KeyRanges{Splits: kernels.AttnMaxRanges, Block: kernels.AttnKeyBlock,
				BlockFrom: from, BlockKeys: u.Config.keyBlockKeys(), ShortSplits: splits}
		}
		attrs := ranges.Attrs()
		attrs["scale"], attrs["splits"], attrs["key_block"] = v.Attrs.Float("scale"), int64(ranges.Splits), int64(ranges.Block)
		if tiled {
			attrs[gpu.AttrPrefillTiled] = int64(1)
		}
		part, err := r.fuse("split", "attention_partial", sibling(v.Name, "attn_partial"), attrs, v.Args)
		if err != nil {
			return err
		}
		if err := r.fuseInto(v, "merge", "attention_merge", v.Name, ranges.Attrs(), []*graph.Value{part}); err != nil {
			return err
		}
	}
	r.finish()
	return nil
}
