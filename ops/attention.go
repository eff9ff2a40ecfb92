package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// Causal grouped-query attention over a KV cache, and the cache append that precedes it.
// The cache holds rows 0..C-1 from earlier steps; kv_append writes this step's rows
// C..C+T-1, then query t attends to rows 0..C+t.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "kv_append", Doc: "cache[N,KVH,D] with rows C..C+T-1 set to x f32[T,KVH,D]", Args: 2,
			Flags: graph.StateUpdate | graph.StepScalars, Infer: inferKVAppend},
		Cost: costKVAppend,
		Ref:  refKVAppend,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "attention", Doc: "causal GQA softmax(q·kᵀ·scale)·v over cache rows 0..C+t, fp32 softmax", Args: 3,
			Flags: graph.StepScalars, Attrs: []string{"scale"}, Infer: inferAttention},
		Cost: costAttention,
		Ref:  refAttention,
	})
}

func inferKVAppend(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	cache, err := wantRank(v, 0, "cache", 3, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 1, "x", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("kv heads (cache vs x)", cache.Shape[1], x.Shape[1]); err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("head dim (cache vs x)", cache.Shape[2], x.Shape[2]); err != nil {
		return graph.Type{}, err
	}
	return cache, nil
}

func costKVAppend(v *graph.Value, b graph.Bindings) Cost {
	x := arg(v, 1)
	return Cost{BytesRead: x.Bytes(b), BytesWritten: bytesOfElems(arg(v, 0), elemsOf(x, b))}
}

func refKVAppend(env *Env, v *graph.Value, in, out []*Tensor) error {
	cache, x := in[0], in[1]
	N, T := cache.Shape[0], x.Shape[0]
	C := env.Bind.C
	if C < 0 || C+T > N {
		return fmt.Errorf("kv_append: rows %d..%d do not fit a cache of %d rows (context full)", C, C+T-1, N)
	}
	dst := out[0]
	if len(dst.Data) > 0 && &dst.Data[0] != &cache.Data[0] {
		copy(dst.Data, cache.Data)
	}
	rows := stateRows{t: dst, cols: cache.Shape[1] * cache.Shape[2]}
	xs := x.F32()
	for t := 0; t < T; t++ {
		rows.write(C+t, xs[t*rows.cols:(t+1)*rows.cols])
	}
	return nil
}

func inferAttention(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 3); err != nil {
		return graph.Type{}, err
	}
	q, err := wantRank(v, 0, "q", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	k, err := wantRank(v, 1, "k_cache", 3, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	vc, err := wantRank(v, 2, "v_cache", 3, stateDTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	if !k.Shape.Equal(vc.Shape) {
		return graph.Type{}, fmt.Errorf("k_cache %s and v_cache %s differ in shape", k.Shape, vc.Shape)
	}
	if err := sameDim("head dim (q vs cache)", q.Shape[2], k.Shape[2]); err != nil {
		return graph.Type{}, err
	}
	nh, err := constDim("query heads", q.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	kvh, err := constDim("kv heads", k.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	if kvh == 0 || nh%kvh != 0 {
		return graph.Type{}, fmt.Errorf("query heads %d are not a multiple of kv heads %d", nh, kvh)
	}
	if _, err := positiveFloatAttr(v, "scale"); err != nil {
		return graph.Type{}, err
	}
	return q, nil
}

func costAttention(v *graph.Value, b graph.Bindings) Cost {
	q, k := arg(v, 0), arg(v, 1)
	T, C := int64(q.Shape[0].Eval(b)), int64(b.C) // T may already be substituted in the types
	nh := int64(q.Shape[1].Eval(b))
	kvh, D := int64(k.Shape[1].Eval(b)), int64(k.Shape[2].Eval(b))
	visible := T*C + T*(T+1)/2 // Σ_t (C+t+1) key rows per query head
	kvBytes := 2 * bytesOfElems(k, (C+T)*kvh*D)
	return Cost{BytesRead: q.Bytes(b) + kvBytes, BytesWritten: v.Type.Bytes(b), Flops: 4 * nh * D * visible}
}

func refAttention(env *Env, v *graph.Value, in, out []*Tensor) error {
	q, kc, vc := in[0], in[1], in[2]
	T, NH, D := q.Shape[0], q.Shape[1], q.Shape[2]
	N, KVH := kc.Shape[0], kc.Shape[1]
	C := env.Bind.C
	L := C + T
	if C < 0 || L > N {
		return fmt.Errorf("attention: %d context rows exceed the cache's %d", L, N)
	}
	scale := float32(v.Attrs.Float("scale"))
	if !env.referenceKernels() && attnTileable(D) && kc.DType == vc.DType && (kc.DType == graph.F32 || kc.DType == graph.BF16) {
		tiledAttention(env, q, kc, vc, out[0].F32(), C, scale, attnFast)
		return nil
	}
	group := NH / KVH
	qs, o := q.F32(), out[0].F32()
	parallelItems(env, NH, func(_, h int) {
		kvh := h / group
		keys, kstride := cacheHead(kc, kvh, L)
		vals, vstride := cacheHead(vc, kvh, L)
		scores := make([]float32, L)
		for t := 0; t < T; t++ {
			qr := qs[(t*NH+h)*D : (t*NH+h+1)*D]
			n := C + t + 1
			maxS := float32(math.Inf(-1))
			for j := 0; j < n; j++ {
				s := dot(qr, keys[j*kstride:j*kstride+D]) * scale
				scores[j] = s
				maxS = max(maxS, s)
			}
			var sum float32
			for j := 0; j < n; j++ {
				e := float32(math.Exp(float64(scores[j] - maxS)))
				scores[j] = e
				sum += e
			}
			or := o[(t*NH+h)*D : (t*NH+h+1)*D]
			clear(or)
			for j := 0; j < n; j++ {
				axpy(scores[j]/sum, vals[j*vstride:j*vstride+D], or)
			}
		}
	})
	return nil
}

// cacheHead returns rows 0..L-1 of one kv head as float32 and the distance between rows:
// a view into an F32 cache, a decoded copy of a BF16 one.
func cacheHead(cache *Tensor, kvh, L int) ([]float32, int) {
	KVH, D := cache.Shape[1], cache.Shape[2]
	if cache.DType == graph.F32 {
		return cache.F32()[kvh*D:], KVH * D
	}
	rows := stateRows{t: cache, cols: D}
	out := make([]float32, L*D)
	for j := 0; j < L; j++ {
		rows.read(j*KVH+kvh, out[j*D:(j+1)*D])
	}
	return out, D
}
