package ops

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"pistil/graph"
)

// gdnPrologue is the shape of one gated_delta_step case.
type gdnPrologue struct {
	T, Hk, Hv, Dk, Dv, K int
	state                graph.DType // the conv state's storage
	extra                int         // channels after v that the step ignores
}

// gdnStepGraphs declares one Gated DeltaNet step twice over the same inputs a0..a7 (x, a,
// b, conv_state, conv_w, A_log, dt_bias, S), as the model does (conv1d, silu, slices,
// l2_norms, the gates in primitive ops, gated_delta) and fused (gated_delta_step, then
// conv_state_shift); both output o, S' and conv_state'.
func gdnStepGraphs(t *testing.T, p gdnPrologue, args []*Tensor) (unfused, fused *graph.Graph) {
	t.Helper()
	KD := p.Hk * p.Dk
	qScale := 1 / float64(p.Dk)
	declare := func(name string, body func(b *graph.Builder, in []*graph.Value) (o, s, conv *graph.Value)) *graph.Graph {
		b := graph.NewBuilder(graph.New(name), Default)
		in := make([]*graph.Value, len(args))
		for i, a := range args {
			in[i] = b.Source("input", fmt.Sprintf("a%d", i), typeOf(a), nil)
		}
		o, s, conv := body(b, in)
		b.G.AddOutput("out0", o)
		b.G.AddOutput("out1", s)
		b.G.AddOutput("out2", conv)
		if b.Err() != nil {
			t.Fatal(b.Err())
		}
		return b.G
	}
	sel := func(b *graph.Builder, v *graph.Value, i int) *graph.Value {
		return b.Op("select", graph.Attrs{"index": int64(i)}, v)
	}
	heads := func(b *graph.Builder, y *graph.Value, start, H, D int) *graph.Value {
		s := b.Op("slice", graph.Attrs{"axis": int64(1), "start": int64(start), "end": int64(start + H*D)}, y)
		return b.Op("reshape", graph.Attrs{"shape": fmt.Sprintf("[%d,%d,%d]", p.T, H, D)}, s)
	}
	rule := graph.Attrs{"form": "recurrent", "chunk": int64(64)}
	unfused = declare("unfused", func(b *graph.Builder, in []*graph.Value) (o, s, conv *graph.Value) {
		c := b.Op("conv1d", nil, in[0], in[3], in[4])
		y := b.Op("silu", nil, sel(b, c, 0))
		q := b.Op("l2_norm", graph.Attrs{"eps": 1e-6, "scale": qScale}, heads(b, y, 0, p.Hk, p.Dk))
		k := b.Op("l2_norm", graph.Attrs{"eps": 1e-6, "scale": 1.0}, heads(b, y, KD, p.Hk, p.Dk))
		v := heads(b, y, 2*KD, p.Hv, p.Dv)
		decay := b.Op("neg", nil, b.Op("exp", nil, in[5]))
		g := b.Op("mul", nil, b.Op("softplus", nil, b.Op("add", nil, in[1], in[6])), decay)
		beta := b.Op("sigmoid", nil, in[2])
		d := b.Op("gated_delta", rule, q, k, v, g, beta, in[7])
		return sel(b, d, 0), sel(b, d, 1), sel(b, c, 1)
	})
	fused = declare("fused", func(b *graph.Builder, in []*graph.Value) (o, s, conv *graph.Value) {
		attrs := graph.Attrs{"key_heads": int64(p.Hk), "q_start": int64(0), "k_start": int64(KD), "v_start": int64(2 * KD),
			"q_eps": 1e-6, "q_scale": qScale, "k_eps": 1e-6, "k_scale": 1.0, "form": "recurrent", "chunk": int64(64)}
		step := b.Op("gated_delta_step", attrs, in...)
		return sel(b, step, 0), sel(b, step, 1), b.Op("conv_state_shift", nil, in[0], in[3])
	})
	return unfused, fused
}

func gdnStepArgs(rng *rand.Rand, p gdnPrologue) []*Tensor {
	CD := 2*p.Hk*p.Dk + p.Hv*p.Dv + p.extra
	state := randTensor(rng, 1, p.K-1, CD)
	if p.state == graph.BF16 {
		state = toBF16(state)
	}
	return []*Tensor{
		randTensor(rng, 1, p.T, CD), randTensor(rng, 1, p.T, p.Hv), randTensor(rng, 1, p.T, p.Hv), state,
		toBF16(randTensor(rng, 0.5, CD, p.K)), randTensor(rng, 0.5, p.Hv), toBF16(randTensor(rng, 0.5, p.Hv)),
		randTensor(rng, 0.3, p.Hv, p.Dk, p.Dv),
	}
}

// clones gives each run its own copy: the state updates write their inputs in place.
func clones(args []*Tensor) []*Tensor {
	out := make([]*Tensor, len(args))
	for i, a := range args {
		c := *a
		c.Data = append([]byte(nil), a.Data...)
		c.Shape = append([]int(nil), a.Shape...)
		out[i] = &c
	}
	return out
}

// gated_delta_step with conv_state_shift computes what the unfused ops compute: the
// references are the unfused ones run in the same order, so the bound only allows a
// platform that contracts a*b+c.
func TestGatedDeltaStepMatchesTheUnfusedOps(t *testing.T) {
	rng := rand.New(rand.NewSource(31))
	for _, p := range []gdnPrologue{
		{T: 1, Hk: 2, Hv: 4, Dk: 32, Dv: 24, K: 4, state: graph.F32},
		{T: 1, Hk: 2, Hv: 2, Dk: 16, Dv: 8, K: 4, state: graph.BF16, extra: 5},
		{T: 1, Hk: 1, Hv: 3, Dk: 8, Dv: 7, K: 2, state: graph.F32},
		{T: 3, Hk: 2, Hv: 4, Dk: 32, Dv: 16, K: 4, state: graph.BF16},
	} {
		t.Run(fmt.Sprintf("T%d_Hk%d_Hv%d_Dk%d_Dv%d_K%d_%s", p.T, p.Hk, p.Hv, p.Dk, p.Dv, p.K, p.state), func(t *testing.T) {
			args := gdnStepArgs(rng, p)
			unfused, fused := gdnStepGraphs(t, p, args)
			want := runGraph(t, unfused, graph.Bindings{T: p.T}, clones(args)...)
			got := runGraph(t, fused, graph.Bindings{T: p.T}, clones(args)...)
			for i, name := range []string{"o", "S'", "conv_state'"} {
				if got[i].DType != want[i].DType {
					t.Fatalf("%s: %s, want %s", name, got[i].DType, want[i].DType)
				}
				if got[i].DType == graph.BF16 {
					if string(got[i].Data) != string(want[i].Data) {
						t.Errorf("%s differs", name)
					}
					continue
				}
				near(t, name, got[i].F32(), want[i].F32(), 1e-6)
			}
		})
	}
}

func TestGatedDeltaStepInferErrors(t *testing.T) {
	rng := rand.New(rand.NewSource(32))
	p := gdnPrologue{T: 1, Hk: 2, Hv: 4, Dk: 16, Dv: 8, K: 4, state: graph.F32}
	base := graph.Attrs{"key_heads": int64(2), "q_start": int64(0), "k_start": int64(32), "v_start": int64(64),
		"q_eps": 1e-6, "q_scale": 0.25, "k_eps": 1e-6, "k_scale": 1.0, "form": "recurrent", "chunk": int64(64)}
	with := func(key string, val any) graph.Attrs {
		a := graph.Attrs{}
		for k, v := range base {
			a[k] = v
		}
		a[key] = val
		return a
	}
	for _, c := range []struct {
		name  string
		attrs graph.Attrs
		want  string
	}{
		{"key heads", with("key_heads", int64(3)), "not a multiple of key_heads"},
		{"v past the channels", with("v_start", int64(70)), "v channels [70, 102) outside the conv's 96"},
		{"form", with("form", "parallel"), "want recurrent or chunked"},
	} {
		if _, err := opGraph("gated_delta_step", c.attrs, gdnStepArgs(rng, p)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
