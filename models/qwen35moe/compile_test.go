package qwen35moe_test

import (
	"testing"

	"pistil/graph"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
)

// The declared 35B-A3B graph passes graph.Check, round-trips through the text format, and
// compiles; the op costs then give model-spec.md §6.3's weight bytes per decode token.
func TestDefaultGraphChecksAndCompiles(t *testing.T) {
	g, err := qwen35moe.Build(qwen35moe.Default(), qwen35moe.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := graph.Check(g, ops.Default); err != nil {
		t.Fatal(err)
	}
	text := graph.Print(g)
	back, err := graph.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if graph.Print(back) != text {
		t.Fatal("the model graph does not round-trip through the text format")
	}
	p, err := passes.Compile(g, ops.Default, passes.Phase{Name: "decode", Tokens: 1, Context: 4096}, passes.Config{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Totals.WeightBytesRead, int64(1_669_563_648); got != want {
		t.Errorf("decode weight bytes per token %d, model-spec §6.3 says %d", got, want)
	}
}
