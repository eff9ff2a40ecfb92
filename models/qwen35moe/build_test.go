package qwen35moe

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"pistil/graph"
)

func TestBuildDefaultDeclaresEveryWeightOnce(t *testing.T) {
	cfg := Default()
	g, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, v := range g.Values {
		if v.Op == "weight" {
			declared = append(declared, v.Name)
		}
	}
	want := WeightNames(cfg)
	sort.Strings(declared)
	sort.Strings(want)
	if strings.Join(declared, ",") != strings.Join(want, ",") {
		t.Fatalf("graph declares %d weights, WeightNames lists %d", len(declared), len(want))
	}
	// 10 attention layers x (k, v) + 30 GDN layers x (conv, recurrent) + logits.
	if got := len(g.Outputs); got != 1+2*10+2*30 {
		t.Errorf("%d outputs, want 81", got)
	}
	logits := g.Output("logits")
	if logits == nil || logits.Type.String() != "f32[1,248320]" {
		t.Errorf("logits = %v, want f32[1,248320]", logits)
	}
	for _, name := range []string{"layers.3.k_cache", "layers.0.conv_state", "layers.0.recurrent_state"} {
		if g.Output(name) == nil {
			t.Errorf("no output %s", name)
		}
	}
	if ty := g.Output("layers.3.k_cache").Type.String(); ty != "bf16[N,2,256]" {
		t.Errorf("k_cache type %s", ty)
	}
	if ty := g.Output("layers.0.recurrent_state").Type.String(); ty != "f32[32,128,128]" {
		t.Errorf("recurrent_state type %s", ty)
	}
}

func TestMLXWeightTypes(t *testing.T) {
	wt := MLXWeightType(Default())
	cases := map[string]string{
		"embed_tokens":                        "q4g64[248320,2048]",
		"layers.0.mlp.gate":                   "q8g64[256,2048]",
		"layers.0.mlp.shared_expert_gate":     "q8g64[1,2048]",
		"layers.0.mlp.experts.down_proj":      "q4g64[256,2048,512]",
		"layers.0.linear_attn.conv1d":         "bf16[8192,4]",
		"layers.0.linear_attn.A_log":          "f32[32]",
		"layers.0.input_layernorm":            "bf16[2048]",
		"layers.3.self_attn.q_proj":           "q4g64[8192,2048]",
		"layers.0.linear_attn.in_proj_b":      "q4g64[32,2048]",
		"lm_head":                             "q4g64[248320,2048]",
		"layers.39.mlp.shared_expert.up_proj": "q4g64[512,2048]",
	}
	shapes := map[string][]int{}
	for _, w := range Weights(Default()) {
		shapes[w.Name] = w.Shape
	}
	for name, want := range cases {
		ty, err := wt(name, graph.S(shapes[name]...))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ty.String() != want {
			t.Errorf("%s: %s, want %s", name, ty, want)
		}
	}
}

func TestBuildOptionsErrors(t *testing.T) {
	cfg := Default()
	if _, err := Build(cfg, BuildOptions{DeltaRule: "fast"}); err == nil || !strings.Contains(err.Error(), "DeltaRule") {
		t.Errorf("bad DeltaRule: %v", err)
	}
	if _, err := Build(cfg, BuildOptions{KVDType: graph.Q4}); err == nil || !strings.Contains(err.Error(), "KVDType") {
		t.Errorf("bad KVDType: %v", err)
	}
	missing := func(name string, s graph.Shape) (graph.Type, error) {
		if name == "layers.5.mlp.gate" {
			return graph.Type{}, fmt.Errorf("no tensor %s", name)
		}
		return MLXWeightType(cfg)(name, s)
	}
	if _, err := Build(cfg, BuildOptions{WeightType: missing}); err == nil || !strings.Contains(err.Error(), "layers.5.mlp.gate") {
		t.Errorf("missing weight: %v", err)
	}
	wrongShape := func(name string, s graph.Shape) (graph.Type, error) {
		return graph.TensorType(graph.BF16, graph.D(7)), nil
	}
	if _, err := Build(cfg, BuildOptions{WeightType: wrongShape}); err == nil || !strings.Contains(err.Error(), "declared shape") {
		t.Errorf("wrong shape: %v", err)
	}
}
