package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Split attention: the GPU form of attention for steps with few (kv head, token) pairs
// (decode). attention_partial cuts each query's keys 0..C+t into at most `splits` ranges
// of whole blocks of `key_block` keys (KeyRanges: equal ranges, or fixed blocks at long
// context) and computes each range's partial softmax state, an empty one for a range
// past the keys; attention_merge combines the ranges. The pair equals attention up to rounding; it
// exists so that a GPU can spread one token's keys over many groups with no group
// waiting for another (passes: split-attention makes it, gpu lowers it).

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "attention_partial",
			Doc:   "per key range s of `splits` (whole `key_block` blocks of keys 0..C+t; fixed `block_keys` ranges from `block_from` keys on): max m, sum l of exp(score-m), Σ exp(score-m)·v; f32 [T, NH, splits, D+2]",
			Args:  3,
			Flags: graph.StepScalars, Attrs: []string{"scale", "splits", "key_block"}, Infer: inferAttentionPartial},
		Cost: costAttentionPartial,
		Ref:  refAttentionPartial,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "attention_merge",
			Doc:  "attention's output from attention_partial's ranges: Σ_s exp(m_s-M)·acc_s / Σ_s exp(m_s-M)·l_s (with attention_partial's block_* attrs, a GPU reads only the ranges in use)",
			Args: 1, Infer: inferAttentionMerge},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			r := KeyRangesOf(v.Attrs)
			r.Splits = arg(v, 0).Shape[2].Eval(b)
			read := r.partialBytes(arg(v, 0), b)
			return Cost{BytesRead: read, BytesWritten: v.Type.Bytes(b), Flops: read / 2}
		},
		Ref: refAttentionMerge,
	})
}

func inferAttentionPartial(v *graph.Value) (graph.Type, error) {
	q, err := inferAttention(v)
	if err != nil {
		return graph.Type{}, err
	}
	ranges := KeyRangesOf(v.Attrs)
	if err := ranges.validate(); err != nil {
		return graph.Type{}, err
	}
	splits := ranges.Splits
	d, err := constDim("head dim", q.Shape[2])
	if err != nil {
		return graph.Type{}, err
	}
	return graph.TensorType(graph.F32, q.Shape[0], q.Shape[1], graph.D(splits), graph.D(d+2)), nil
}

func inferAttentionMerge(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	p, err := wantRank(v, 0, "partials", 4, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := constDim("partial width", p.Shape[3])
	if err != nil {
		return graph.Type{}, err
	}
	if w < 3 {
		return graph.Type{}, fmt.Errorf("attention_merge: partial width %d leaves no head dim (want D+2)", w)
	}
	return graph.TensorType(graph.F32, p.Shape[0], p.Shape[1], graph.D(w-2)), nil
}

func costAttentionPartial(v *graph.Value, b graph.Bindings) Cost {
	c := costAttention(v, b)
	c.BytesWritten = KeyRangesOf(v.Attrs).partialBytes(v.Type, b)
	return c
}

// KeyRanges is how attention_partial cuts the keys 0..n-1 a query sees into ranges of
// whole Block-key blocks. By default into Splits ranges of equal length, so a range grows
// with the context; with BlockFrom > 0, a query that sees BlockFrom keys or more gets
// ranges of BlockKeys keys (longer only past Splits of them), so the number of groups
// grows with the context instead, and one that sees fewer gets ShortSplits ranges as
// before. The GPU kernels (ops/kernels/attention.k, att_span) cut them the same way.
type KeyRanges struct {
	Splits, Block                     int
	BlockFrom, BlockKeys, ShortSplits int
}

// KeyRangesOf reads the ranges from attention_partial's attrs.
func KeyRangesOf(a graph.Attrs) KeyRanges {
	return KeyRanges{Splits: a.Int("splits"), Block: a.Int("key_block"),
		BlockFrom: a.Int("block_from"), BlockKeys: a.Int("block_keys"), ShortSplits: a.Int("short_splits")}
}

// Attrs are the attrs of attention_partial (and of attention_merge, whose GPU kernel
// merges only the ranges in use) that carry the fixed-block rule; none without it.
func (r KeyRanges) Attrs() graph.Attrs {
	if r.BlockFrom <= 0 {
		return graph.Attrs{}
	}
	return graph.Attrs{"block_from": int64(r.BlockFrom), "block_keys": int64(r.BlockKeys), "short_splits": int64(r.ShortSplits), "key_block": int64(r.Block)}
}

// partialBytes is the partial states a step writes (attention_partial) or reads
// (attention_merge): every range's, or with the fixed-block rule only the ranges in use
// (counted at the last token's keys for every token).
func (r KeyRanges) partialBytes(p graph.Type, b graph.Bindings) int64 {
	if r.BlockFrom <= 0 || r.Splits < 1 || r.Block < 1 {
		return p.Bytes(b)
	}
	T, NH, W := int64(p.Shape[0].Eval(b)), int64(p.Shape[1].Eval(b)), int64(p.Shape[3].Eval(b))
	return T * NH * int64(r.Used(b.C+int(T))) * W * 4
}

func (r KeyRanges) validate() error {
	switch {
	case r.Splits < 1 || r.Block < 1:
		return fmt.Errorf("attention_partial: splits %d and key_block %d must be positive", r.Splits, r.Block)
	case r.BlockFrom < 0:
		return fmt.Errorf("attention_partial: block_from %d must not be negative", r.BlockFrom)
	case r.BlockFrom > 0 && (r.BlockKeys < r.Block || r.BlockKeys%r.Block != 0 || r.ShortSplits < 1 || r.ShortSplits > r.Splits):
		return fmt.Errorf("attention_partial: block_keys %d must be a positive multiple of key_block %d and short_splits %d within 1..splits %d",
			r.BlockKeys, r.Block, r.ShortSplits, r.Splits)
	}
	return nil
}

// Span is the keys of each range for a query that sees n keys.
func (r KeyRanges) Span(n int) int {
	var span int
	if r.BlockFrom > 0 && n >= r.BlockFrom {
		span = max(r.BlockKeys, (n+r.Splits-1)/r.Splits)
	} else {
		splits := r.Splits
		if r.BlockFrom > 0 {
			splits = r.ShortSplits
		}
		span = (n + splits - 1) / splits
	}
	return (span + r.Block - 1) / r.Block * r.Block
}

// Used is how many ranges hold keys for a query that sees n keys (at most Splits).
func (r KeyRanges) Used(n int) int {
	span := r.Span(n)
	return (n + span - 1) / span
}

// Range is key range s of a query that sees n keys: [j0, j1), empty from Used(n) on.
func (r KeyRanges) Range(n, s int) (j0, j1 int) {
	span := r.Span(n)
	j0 = min(s*span, n)
	return j0, min(j0+span, n)
}

func refAttentionPartial(env *Env, v *graph.Value, in, out []*Tensor) error {
	q, kc, vc := in[0], in[1], in[2]
	T, NH, D := q.Shape[0], q.Shape[1], q.Shape[2]
	N, KVH := kc.Shape[0], kc.Shape[1]
	C := env.Bind.C
	L := C + T
	if C < 0 || L > N {
		return fmt.Errorf("attention_partial: %d context rows exceed the cache's %d", L, N)
	}
	scale := float32(v.Attrs.Float("scale"))
	ranges := KeyRangesOf(v.Attrs)
	splits := ranges.Splits
	group := NH / KVH
	qs, part := q.F32(), out[0].F32()
	stride := D + 2
	parallelItems(env, NH, func(_, h int) {
		kvh := h / group
		keys, kstride := cacheHead(kc, kvh, L)
		vals, vstride := cacheHead(vc, kvh, L)
		scores := make([]float32, L)
		for t := 0; t < T; t++ {
			qr := qs[(t*NH+h)*D : (t*NH+h+1)*D]
			n := C + t + 1
			for s := 0; s < splits; s++ {
				p := part[((t*NH+h)*splits+s)*stride : ((t*NH+h)*splits+s+1)*stride]
				clear(p)
				j0, j1 := ranges.Range(n, s)
				m := float32(math.Inf(-1))
				for j := j0; j < j1; j++ {
					scores[j] = dot(qr, keys[j*kstride:j*kstride+D]) * scale
					m = max(m, scores[j])
				}
				var l float32
				for j := j0; j < j1; j++ {
					e := float32(math.Exp(float64(scores[j] - m)))
					l += e
					axpy(e, vals[j*vstride:j*vstride+D], p[2:])
				}
				p[0], p[1] = m, l
			}
		}
	})
	return nil
}

func refAttentionMerge(env *Env, v *graph.Value, in, out []*Tensor) error {
	p := in[0]
	T, NH, S, W := p.Shape[0], p.Shape[1], p.Shape[2], p.Shape[3]
	D := W - 2
	part, o := p.F32(), out[0].F32()
	weights := make([]float32, S)
	for r := 0; r < T*NH; r++ {
		rows := part[r*S*W : (r+1)*S*W]
		M := float32(math.Inf(-1))
		for s := 0; s < S; s++ {
			M = max(M, rows[s*W])
		}
		var L float32
		for s := 0; s < S; s++ {
			weights[s] = 0
			if m := rows[s*W]; !math.IsInf(float64(m), -1) {
				weights[s] = float32(math.Exp(float64(m - M)))
			}
			L += weights[s] * rows[s*W+1]
		}
		or := o[r*D : (r+1)*D]
		clear(or)
		for s := 0; s < S; s++ {
			axpy(weights[s]/L, rows[s*W+2:(s+1)*W], or)
		}
	}
	return nil
}
