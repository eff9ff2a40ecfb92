package checkpoint

import (
	"math"
	"pistil/internal/fixtures"
	"slices"
	"testing"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/models/safetensors"
	"pistil/ops"
)

var (
	goldenHF  = fixtures.Path("golden/tiny-s1/hf")
	goldenMLX = fixtures.Path("golden/tiny-s1/mlx-q4")
)

func openGolden(t *testing.T, dir string, want Layout) *Checkpoint {
	t.Helper()
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	if ck.Layout() != want {
		t.Fatalf("%s: layout %s, want %s", dir, ck.Layout(), want)
	}
	return ck
}

func bindAll(t *testing.T, ck *Checkpoint) map[string]*ops.Tensor {
	t.Helper()
	ws, err := ck.Bind(qwen35moe.WeightNames(ck.Config()))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func row(t *ops.Tensor, r, cols int) []float32 {
	dst := make([]float32, cols)
	t.Row(r, cols, dst)
	return dst
}

func TestGoldenBindsCompletely(t *testing.T) {
	for _, tc := range []struct {
		dir    string
		layout Layout
	}{{goldenHF, HFOfficial}, {goldenMLX, MLX}} {
		ck := openGolden(t, tc.dir, tc.layout)
		ws := bindAll(t, ck)
		if len(ws) != len(qwen35moe.Weights(ck.Config())) {
			t.Errorf("%s: bound %d weights, want %d", tc.dir, len(ws), len(qwen35moe.Weights(ck.Config())))
		}
		// Every bound tensor agrees with WeightType and the config's logical shape.
		for _, w := range qwen35moe.Weights(ck.Config()) {
			typ, err := ck.WeightType(w.Name, graph.S(w.Shape...))
			if err != nil {
				t.Fatal(err)
			}
			got := ws[w.Name]
			if got.DType != typ.DType || got.Group != typ.Group || !slices.Equal(got.Shape, w.Shape) {
				t.Errorf("%s: tensor %s g%d %v, WeightType %s", w.Name, got.DType, got.Group, got.Shape, typ)
			}
		}
	}
}

func TestGoldenHFNormIsOnePlusW(t *testing.T) {
	ck := openGolden(t, goldenHF, HFOfficial)
	raw, err := safetensors.OpenDir(goldenHF)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, name := range []string{"layers.0.input_layernorm", "layers.3.self_attn.q_norm", "norm"} {
		got, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType != graph.F32 {
			t.Fatalf("%s presented as %s, want f32", name, got.DType)
		}
		data, _ := raw.Data(ck.storedPath(name) + ".weight")
		stored := &ops.Tensor{DType: graph.BF16, Shape: got.Shape, Data: data}
		for i := range got.F32() {
			if want := 1 + stored.Float(i); got.F32()[i] != want {
				t.Fatalf("%s[%d] = %g, want 1+w = %g", name, i, got.F32()[i], want)
			}
		}
	}
	// linear_attn.norm is never shifted.
	typ, err := ck.WeightType("layers.0.linear_attn.norm", graph.S(ck.Config().LinearValueHeadDim))
	if err != nil || typ.DType != graph.BF16 {
		t.Fatalf("linear_attn.norm: %s %v, want bf16 as stored", typ, err)
	}
}

func TestGoldenNormsAgreeAcrossLayouts(t *testing.T) {
	hf := bindAll(t, openGolden(t, goldenHF, HFOfficial))
	mlx := bindAll(t, openGolden(t, goldenMLX, MLX))
	for _, name := range []string{"layers.0.input_layernorm", "layers.5.post_attention_layernorm", "layers.7.self_attn.k_norm", "norm", "layers.1.linear_attn.norm", "layers.2.linear_attn.conv1d", "layers.2.linear_attn.dt_bias", "layers.6.linear_attn.A_log"} {
		a, b := hf[name], mlx[name]
		if !slices.Equal(a.Shape, b.Shape) {
			t.Fatalf("%s: HF %v, MLX %v", name, a.Shape, b.Shape)
		}
		for i := 0; i < a.Elements(); i++ {
			// MLX holds bf16(1+w); HF's 1+w is exact in f32. bf16 keeps 8 significant bits.
			x, y := a.Float(i), b.Float(i)
			if math.Abs(float64(x-y)) > math.Abs(float64(x))/128+1e-6 {
				t.Fatalf("%s[%d]: HF %g, MLX %g", name, i, x, y)
			}
		}
	}
	if mlx["layers.6.linear_attn.A_log"].DType != graph.F32 || hf["layers.6.linear_attn.A_log"].DType != graph.F32 {
		t.Error("A_log is not presented as f32 in both layouts")
	}
}

func TestGoldenMLXQuantization(t *testing.T) {
	ck := openGolden(t, goldenMLX, MLX)
	cfg := ck.Config()
	H := cfg.HiddenSize
	router, err := ck.WeightType("layers.0.mlp.gate", graph.S(cfg.NumExperts, H))
	if err != nil {
		t.Fatal(err)
	}
	if router.DType != graph.Q8 || router.Group != 64 {
		t.Errorf("layer 0 router is %s, want q8g64", router)
	}
	for _, name := range []string{"layers.0.mlp.shared_expert_gate"} {
		typ, err := ck.WeightType(name, graph.S(1, H))
		if err != nil || typ.DType != graph.Q8 {
			t.Errorf("%s: %s %v, want q8", name, typ, err)
		}
	}
	experts, err := ck.WeightType("layers.0.mlp.experts.down_proj", graph.S(cfg.NumExperts, H, cfg.MoEIntermediate))
	if err != nil || experts.DType != graph.Q4 || experts.Group != 64 {
		t.Errorf("experts.down_proj: %s %v, want q4g64", experts, err)
	}
	if _, err := ck.WeightType("layers.0.mlp.gate", graph.S(cfg.NumExperts, H+1)); err == nil {
		t.Error("WeightType accepted a wrong logical shape")
	}
}

// The MLX golden weights are the HF ones quantized, so a dequantized row must be finite
// and within about half a quantization step of the bf16 original.
func TestGoldenMLXRowsDequantizeNearHF(t *testing.T) {
	hf := bindAll(t, openGolden(t, goldenHF, HFOfficial))
	mlx := bindAll(t, openGolden(t, goldenMLX, MLX))
	for _, tc := range []struct {
		name string
		rows []int
	}{
		{"embed_tokens", []int{0, 17, 511}},
		{"layers.0.mlp.gate", []int{0, 15}},                    // 8-bit
		{"layers.3.self_attn.q_proj", []int{0, 1023}},          // 4-bit
		{"layers.4.mlp.experts.gate_proj", []int{0, 64*7 + 3}}, // stacked: expert 7 row 3
		{"layers.4.mlp.experts.up_proj", []int{64*15 + 63}},    // HF side is the strided view
		{"layers.7.mlp.experts.down_proj", []int{192*3 + 100}},
	} {
		q, d := mlx[tc.name], hf[tc.name]
		cols := q.Shape[len(q.Shape)-1]
		for _, r := range tc.rows {
			a, b := row(q, r, cols), row(d, r, cols)
			var maxDiff, maxAbs float64
			for c := range a {
				if math.IsNaN(float64(a[c])) || math.IsInf(float64(a[c]), 0) {
					t.Fatalf("%s row %d col %d: %g", tc.name, r, c, a[c])
				}
				maxDiff = math.Max(maxDiff, math.Abs(float64(a[c]-b[c])))
				maxAbs = math.Max(maxAbs, math.Abs(float64(b[c])))
			}
			levels := float64(int(1)<<q.DType.Bits() - 1)
			// A step is at most 2*maxAbs/levels; rounding costs half a step, bf16 scales a little more.
			if bound := 0.6 * 2 * maxAbs / levels; maxDiff > bound || maxAbs == 0 {
				t.Errorf("%s row %d: max |mlx-hf| = %g, want <= %g (max |w| %g)", tc.name, r, maxDiff, bound, maxAbs)
			}
		}
	}
}

func TestGoldenHFFusedViews(t *testing.T) {
	ck := openGolden(t, goldenHF, HFOfficial)
	cfg := ck.Config()
	E, I, H := cfg.NumExperts, cfg.MoEIntermediate, cfg.HiddenSize
	raw, err := safetensors.OpenDir(goldenHF)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	data, _ := raw.Data("model.language_model.layers.2.mlp.experts.gate_up_proj")
	fused := &ops.Tensor{DType: graph.BF16, Shape: []int{E, 2 * I, H}, Data: data}
	gate, err := ck.Tensor("layers.2.mlp.experts.gate_proj")
	if err != nil {
		t.Fatal(err)
	}
	up, err := ck.Tensor("layers.2.mlp.experts.up_proj")
	if err != nil {
		t.Fatal(err)
	}
	if gate.Stride0 != 2*I*H*2 || !slices.Equal(gate.Shape, []int{E, I, H}) {
		t.Fatalf("gate view: stride %d shape %v", gate.Stride0, gate.Shape)
	}
	for _, e := range []int{0, 5, E - 1} {
		for _, r := range []int{0, I - 1} {
			g, u := row(gate, e*I+r, H), row(up, e*I+r, H)
			wg, wu := row(fused, e*2*I+r, H), row(fused, e*2*I+I+r, H)
			for c := 0; c < H; c++ {
				if g[c] != wg[c] || u[c] != wu[c] {
					t.Fatalf("expert %d row %d col %d: gate %g up %g, fused rows give %g %g", e, r, c, g[c], u[c], wg[c], wu[c])
				}
			}
		}
	}
}
