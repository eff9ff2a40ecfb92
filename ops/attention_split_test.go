package ops

import (
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// KeyRanges cut 0..n-1 into consecutive ranges of whole blocks that cover it, the ranges
// in use first: equal ranges (at most Splits) without the fixed-block rule or below its
// switch; ranges of BlockKeys keys from it on, growing only once Splits of them cannot
// hold the keys.
func TestKeyRanges(t *testing.T) {
	rules := []KeyRanges{
		{Splits: 64, Block: 16},
		{Splits: 512, Block: 16, BlockFrom: 32768, BlockKeys: 256, ShortSplits: 64},
		{Splits: 4, Block: 16, BlockFrom: 1, BlockKeys: 16, ShortSplits: 2},
		{Splits: 8, Block: 16, BlockFrom: 100, BlockKeys: 32, ShortSplits: 3},
	}
	for _, r := range rules {
		if err := r.validate(); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 15, 16, 17, 99, 100, 101, 257, 4096, 32767, 32768, 32769, 100000, 131072, 131073, 262144} {
			span, used := r.Span(n), r.Used(n)
			if span%r.Block != 0 || used < 1 || used > r.Splits {
				t.Fatalf("%+v n %d: span %d, %d ranges", r, n, span, used)
			}
			next := 0
			for s := 0; s < r.Splits; s++ {
				j0, j1 := r.Range(n, s)
				if s < used && (j0 != next || j1 <= j0) || s >= used && j0 != j1 {
					t.Fatalf("%+v n %d: range %d is [%d, %d) after %d (%d in use)", r, n, s, j0, j1, next, used)
				}
				next = j1
			}
			if next != n {
				t.Fatalf("%+v n %d: ranges end at %d", r, n, next)
			}
			switch {
			case r.BlockFrom > 0 && n >= r.BlockFrom && n <= r.Splits*r.BlockKeys:
				if span != r.BlockKeys {
					t.Errorf("%+v n %d: span %d past the switch, want the block of %d", r, n, span, r.BlockKeys)
				}
			case r.BlockFrom > 0 && n < r.BlockFrom:
				if used > r.ShortSplits {
					t.Errorf("%+v n %d: %d ranges before the switch, want at most %d", r, n, used, r.ShortSplits)
				}
			}
		}
	}
	for _, bad := range []KeyRanges{
		{Splits: 0, Block: 16},
		{Splits: 8, Block: 16, BlockFrom: -1},
		{Splits: 8, Block: 16, BlockFrom: 10, BlockKeys: 24, ShortSplits: 2},
		{Splits: 8, Block: 16, BlockFrom: 10, BlockKeys: 32, ShortSplits: 9},
		{Splits: 8, Block: 16, BlockFrom: 10, BlockKeys: 32},
	} {
		if bad.validate() == nil {
			t.Errorf("%+v passed validation", bad)
		}
	}
}

// attention_partial with the fixed-block rule, merged, is attention (its unused ranges
// are empty states), at contexts before, at and past the switch, f32 and bf16 caches.
func TestAttentionPartialBlocksMergeToAttention(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	const NH, KVH, D = 4, 2, 32
	for _, dt := range []graph.DType{graph.F32, graph.BF16} {
		for _, C := range []int{0, 63, 64, 200} {
			N := C + 1
			q := randTensor(rng, 1, 1, NH, D)
			kc, vc := randTensor(rng, 1, N, KVH, D), randTensor(rng, 1, N, KVH, D)
			if dt == graph.BF16 {
				kc, vc = toBF16(kc), toBF16(vc)
			}
			env := &Env{Bind: graph.Bindings{C: C, T: 1, N: N}, Kernels: KernelsReference}
			scale := 1 / math.Sqrt(float64(D))
			want := NewTensor(graph.F32, 1, NH, D)
			if err := refAttention(env, &graph.Value{Op: "attention", Attrs: graph.Attrs{"scale": scale}}, []*Tensor{q, kc, vc}, []*Tensor{want}); err != nil {
				t.Fatal(err)
			}
			r := KeyRanges{Splits: 16, Block: 16, BlockFrom: 64, BlockKeys: 32, ShortSplits: 3}
			attrs := r.Attrs()
			attrs["scale"], attrs["splits"] = scale, int64(r.Splits)
			part := NewTensor(graph.F32, 1, NH, r.Splits, D+2)
			if err := refAttentionPartial(env, &graph.Value{Op: "attention_partial", Attrs: attrs}, []*Tensor{q, kc, vc}, []*Tensor{part}); err != nil {
				t.Fatal(err)
			}
			got := NewTensor(graph.F32, 1, NH, D)
			if err := refAttentionMerge(env, &graph.Value{Op: "attention_merge", Attrs: r.Attrs()}, []*Tensor{part}, []*Tensor{got}); err != nil {
				t.Fatal(err)
			}
			for i, w := range want.F32() {
				if d := math.Abs(float64(got.F32()[i] - w)); d > 1e-5*max(1, math.Abs(float64(w))) {
					t.Fatalf("%s C %d: element %d is %v, attention %v", dt, C, i, got.F32()[i], w)
				}
			}
		}
	}
}
