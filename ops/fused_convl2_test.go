package ops

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

// convL2Case is the shape of one conv1d_silu_l2 case: H heads of D for q at qStart and
// for k at kStart, over Ch channels.
type convL2Case struct {
	T, Ch, K, H, D, qStart, kStart int
	state                          graph.DType
}

func (c convL2Case) attrs() graph.Attrs {
	return graph.Attrs{"q_start": int64(c.qStart), "q_end": int64(c.qStart + c.H*c.D),
		"k_start": int64(c.kStart), "k_end": int64(c.kStart + c.H*c.D), "shape": fmt.Sprintf("[%d,%d,%d]", c.T, c.H, c.D),
		"q_eps": 1e-6, "q_scale": 1 / float64(c.D), "k_eps": 1e-5, "k_scale": 1.0}
}

func (c convL2Case) args(rng *rand.Rand) []*Tensor {
	state := randTensor(rng, 1, c.K-1, c.Ch)
	if c.state == graph.BF16 {
		state = toBF16(state)
	}
	return []*Tensor{randTensor(rng, 1, c.T, c.Ch), state, toBF16(randTensor(rng, 0.5, c.Ch, c.K))}
}

// unfusedConvL2 declares what the model's graph has after fuse-conv-silu and fuse-slice-l2:
// conv1d_silu, then a slice_l2_norm for q and one for k; outputs y, q, k, state'.
func unfusedConvL2(t *testing.T, c convL2Case, args []*Tensor) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder(graph.New("unfused"), Default)
	in := make([]*graph.Value, len(args))
	for i, a := range args {
		in[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
	}
	conv := b.Op("conv1d_silu", nil, in...)
	y := b.Op("select", graph.Attrs{"index": int64(0)}, conv)
	a := c.attrs()
	norm := func(part string) *graph.Value {
		return b.Op("slice_l2_norm", graph.Attrs{"axis": int64(1), "start": a[part+"_start"], "end": a[part+"_end"],
			"shape": a["shape"], "eps": a[part+"_eps"], "scale": a[part+"_scale"]}, y)
	}
	b.G.AddOutput("out0", y)
	b.G.AddOutput("out1", norm("q"))
	b.G.AddOutput("out2", norm("k"))
	b.G.AddOutput("out3", b.Op("select", graph.Attrs{"index": int64(1)}, conv))
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	return b.G
}

// conv1d_silu_l2 computes what conv1d_silu followed by the two slice_l2_norms computes,
// to the bit: its reference runs the same sums in the same order.
func TestConvSiLUL2MatchesTheUnfusedOps(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	for _, c := range []convL2Case{
		{T: 1, Ch: 8192, K: 4, H: 16, D: 128, qStart: 0, kStart: 2048, state: graph.F32}, // the model's decode step
		{T: 1, Ch: 8192, K: 4, H: 16, D: 128, qStart: 0, kStart: 2048, state: graph.BF16},
		{T: 3, Ch: 200, K: 4, H: 3, D: 32, qStart: 0, kStart: 96, state: graph.BF16},
		{T: 37, Ch: 200, K: 4, H: 3, D: 32, qStart: 0, kStart: 96, state: graph.BF16},    // a prefill run: conv4Rows, the heads over the workers
		{T: 9, Ch: 8192, K: 4, H: 16, D: 128, qStart: 0, kStart: 2048, state: graph.F32}, // the model's, a short chunk
		{T: 1, Ch: 77, K: 2, H: 2, D: 7, qStart: 5, kStart: 40, state: graph.F32},        // heads unaligned to anything
		{T: 2, Ch: 64, K: 3, H: 2, D: 16, qStart: 32, kStart: 0, state: graph.F32},       // k before q
	} {
		t.Run(fmt.Sprintf("T%d_Ch%d_K%d_H%dx%d_%s", c.T, c.Ch, c.K, c.H, c.D, c.state), func(t *testing.T) {
			args := c.args(rng)
			want := runGraph(t, unfusedConvL2(t, c, args), graph.Bindings{T: c.T}, clones(args)...)
			g, err := opGraph("conv1d_silu_l2", c.attrs(), args...)
			if err != nil {
				t.Fatal(err)
			}
			got := runGraph(t, g, graph.Bindings{T: c.T}, clones(args)...)
			for i, name := range []string{"y", "q", "k", "state'"} {
				if got[i].DType != want[i].DType || fmt.Sprint(got[i].Shape) != fmt.Sprint(want[i].Shape) {
					t.Fatalf("%s: %s%v, want %s%v", name, got[i].DType, got[i].Shape, want[i].DType, want[i].Shape)
				}
				if string(got[i].Data) != string(want[i].Data) {
					t.Errorf("%s differs from the unfused ops' (bits)", name)
				}
			}
		})
	}
}

func TestConvSiLUL2InferErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	c := convL2Case{T: 1, Ch: 96, K: 4, H: 2, D: 16, qStart: 0, kStart: 32, state: graph.F32}
	with := func(key string, val any) graph.Attrs {
		a := c.attrs()
		a[key] = val
		return a
	}
	for _, tc := range []struct {
		name  string
		attrs graph.Attrs
		want  string
	}{
		{"k past the channels", with("k_end", int64(100)), "slice_l2_norm"},
		{"heads do not fill the range", with("q_end", int64(30)), "slice_l2_norm"},
		{"missing attr", func() graph.Attrs { a := c.attrs(); delete(a, "k_scale"); return a }(), "k_scale"},
	} {
		if _, err := opGraph("conv1d_silu_l2", tc.attrs, c.args(rng)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// The expansion (what expand-for-backend makes of the op where a GPU kernel does not cover
// it) computes what the op's reference computes.
func TestConvSiLUL2Expansion(t *testing.T) {
	rng := rand.New(rand.NewSource(43))
	c := convL2Case{T: 3, Ch: 200, K: 4, H: 3, D: 32, qStart: 96, kStart: 0, state: graph.BF16}
	args := c.args(rng)
	want := runGraph(t, unfusedConvL2(t, c, args), graph.Bindings{T: c.T}, clones(args)...)
	got := runGraph(t, expansionGraph(t, "conv1d_silu_l2", c.attrs(), args...), graph.Bindings{T: c.T}, clones(args)...)
	for i, name := range []string{"y", "q", "k", "state'"} {
		if string(got[i].Data) != string(want[i].Data) {
			t.Errorf("%s of the expansion differs from the unfused ops'", name)
		}
	}
}

// BenchmarkConvSiLUL2 is the whole conv1d_silu_l2 of a Gated DeltaNet layer at the
// 35B-A3B's shapes (8,192 channels, q and k 16 heads of 128), on 2 workers: a decode step
// and a 512-token prefill chunk.
//
//	go test ./ops/ -run X -bench ConvSiLUL2
func BenchmarkConvSiLUL2(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	for _, T := range []int{1, 512} {
		c := convL2Case{T: T, Ch: 8192, K: 4, H: 16, D: 128, qStart: 0, kStart: 2048, state: graph.F32}
		args := c.args(rng)
		g, err := opGraph("conv1d_silu_l2", c.attrs(), args...)
		if err != nil {
			b.Fatal(err)
		}
		v := g.Values[len(args)]
		info, _ := Default.Info(v.Op)
		out := []*Tensor{NewTensor(graph.F32, T, 8192), NewTensor(graph.F32, T, 16, 128), NewTensor(graph.F32, T, 16, 128), NewTensor(graph.F32, 3, 8192)}
		env := &Env{Workers: 2, Bind: graph.Bindings{T: T}}
		b.Run(fmt.Sprintf("T=%d", T), func(b *testing.B) {
			for b.Loop() {
				if err := info.Ref(env, v, args, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
