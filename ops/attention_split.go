package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Split attention: the GPU form of attention for steps with few (kv head, token) pairs
// (decode). attention_partial cuts each query's keys 0..C+t into `splits` ranges of
// whole blocks of `key_block` keys and computes each range's partial softmax state;
// attention_merge combines the ranges. The pair equals attention up to rounding; it
// exists so that a GPU can spread one token's keys over many groups with no group
// waiting for another (passes: split-attention makes it, gpu lowers it).

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "attention_partial",
			Doc:   "per key range s of `splits` (whole `key_block` blocks of keys 0..C+t): max m, sum l of exp(score-m), Σ exp(score-m)·v; f32 [T, NH, splits, D+2]",
			Args:  3,
			Flags: graph.StepScalars, Attrs: []string{"scale", "splits", "key_block"}, Infer: inferAttentionPartial},
		Cost: costAttentionPartial,
		Ref:  refAttentionPartial,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "attention_merge",
			Doc:  "attention's output from attention_partial's ranges: Σ_s exp(m_s-M)·acc_s / Σ_s exp(m_s-M)·l_s",
			Args: 1, Infer: inferAttentionMerge},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			return Cost{BytesRead: arg(v, 0).Bytes(b), BytesWritten: v.Type.Bytes(b), Flops: 2 * elemsOf(arg(v, 0), b)}
		},
		Ref: refAttentionMerge,
	})
}

func inferAttentionPartial(v *graph.Value) (graph.Type, error) {
	q, err := inferAttention(v)
	if err != nil {
		return graph.Type{}, err
	}
	splits, block := v.Attrs.Int("splits"), v.Attrs.Int("key_block")
	if splits < 1 || block < 1 {
		return graph.Type{}, fmt.Errorf("attention_partial: splits %d and key_block %d must be positive", splits, block)
	}
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
	c.BytesWritten = v.Type.Bytes(b)
	return c
}

// splitRange is key range s of a query that sees n keys: [j0, j1), empty past the end.
func splitRange(n, splits, block, s int) (j0, j1 int) {
	span := (n + splits - 1) / splits
	span = (span + block - 1) / block * block
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
	splits, block := v.Attrs.Int("splits"), v.Attrs.Int("key_block")
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
				j0, j1 := splitRange(n, splits, block, s)
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
