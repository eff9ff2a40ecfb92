package bench_test

import (
	"context"
	"testing"

	"pistil/bench"
	_ "pistil/cpu"
	"pistil/exec"
	"pistil/internal/fixtures"
	"pistil/plan"
)

// goldenModel opens the golden tiny model with 8-token chunks, and compiles its plans
// with their costs counted at a given context.
func goldenModel(t *testing.T) (*exec.Model, func(tokens, context int) (*plan.Plan, error)) {
	dir, opts := fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Chunk: 8}
	m, err := exec.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, func(tokens, context int) (*plan.Plan, error) {
		o := opts
		o.CostContext = context
		return exec.CompilePlan(dir, o, tokens)
	}
}

// TestMeasureRoofline runs Measure on the golden tiny model and checks the derived
// numbers against the plans by hand: a decode step at context c reads the weights plus
// c rows of every KV cache more than at context 0, and a longer prompt costs more flops.
func TestMeasureRoofline(t *testing.T) {
	m, plans := goldenModel(t)
	spec := bench.Spec{Prompts: []int{3, 16}, Contexts: []int{0, 8}, DecodeTokens: 4, Repeats: 1, BandwidthBytes: 8 << 20, Plans: plans}
	res, err := bench.Measure(context.Background(), m, spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bandwidth == nil || res.Bandwidth.BytesPerSec <= 0 {
		t.Fatalf("no bandwidth measured: %+v", res.Bandwidth)
	}
	decode, err := plans(1, 8)
	if err != nil {
		t.Fatal(err)
	}
	d0, d8 := res.Decode[0], res.Decode[1]
	if d0.WeightBytesPerToken != decode.Totals.WeightBytesRead || d8.WeightBytesPerToken != d0.WeightBytesPerToken {
		t.Errorf("weight bytes per token %d and %d, want the plan's %d at every context",
			d0.WeightBytesPerToken, d8.WeightBytesPerToken, decode.Totals.WeightBytesRead)
	}
	// Each context token adds one row of every K and V cache to what a step reads.
	if got, want := d8.BytesPerToken-d0.BytesPerToken, 8*decode.Totals.KVBytesPerToken; got != want {
		t.Errorf("context 8 reads %d bytes more per token than context 0, want 8 KV rows = %d", got, want)
	}
	for _, d := range res.Decode {
		// The share is of the higher of the line at the start and the one right after the
		// decode's timed runs.
		if d.BandwidthAfter <= 0 {
			t.Errorf("context %d: no line measured after the runs", d.Context)
		}
		line := max(res.Bandwidth.BytesPerSec, d.BandwidthAfter)
		if got := d.BandwidthLine(res.Bandwidth); got != line {
			t.Errorf("context %d: share taken of %v, want the higher line %v", d.Context, got, line)
		}
		want := float64(d.BytesPerToken) * d.MedianTPS / line
		if d.BandwidthShare <= 0 || d.BandwidthShare-want > 1e-12 || want-d.BandwidthShare > 1e-12 {
			t.Errorf("context %d: bandwidth share %v, want %v", d.Context, d.BandwidthShare, want)
		}
	}
	p3, p16 := res.Prefill[0], res.Prefill[1]
	if !(p3.FlopsPerRun > 0 && p16.FlopsPerRun > p3.FlopsPerRun && p3.MedianGFLOPS > 0) {
		t.Errorf("prefill flops %d (3 tokens) and %d (16), %v GFLOP/s", p3.FlopsPerRun, p16.FlopsPerRun, p3.MedianGFLOPS)
	}
	// 16 tokens run as two 8-token chunks, the second at context 8.
	// (A cost context of 0 means the default, so the first chunk's flops are those at
	// context 8 less the 8 x 8 query-key pairs per head it adds.)
	chunk, err := plans(8, 8)
	if err != nil {
		t.Fatal(err)
	}
	at16, err := plans(8, 16)
	if err != nil {
		t.Fatal(err)
	}
	first := 2*chunk.Totals.Flops - at16.Totals.Flops
	if want := first + chunk.Totals.Flops; p16.FlopsPerRun != want {
		t.Errorf("16-token prefill: %d flops, want the two chunks' %d", p16.FlopsPerRun, want)
	}
}

// TestMeasurePrefillAtDepth: a prompt prefilled on top of a context (llama-bench's -d) is
// measured once per depth, labelled with it, and costs the flops of its chunks at that
// depth: an 8-token prompt at depth 8 is exactly the second chunk of a 16-token prompt.
func TestMeasurePrefillAtDepth(t *testing.T) {
	m, plans := goldenModel(t)
	spec := bench.Spec{Prompts: []int{8}, Depths: []int{0, 8}, DecodeTokens: 1, Repeats: 2, Plans: plans}
	if got := spec.Capacity(); got != 16 {
		t.Errorf("capacity %d, want depth + prompt = 16", got)
	}
	res, err := bench.Measure(context.Background(), m, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Prefill) != 2 || res.Prefill[0].Context != 0 || res.Prefill[1].Context != 8 {
		t.Fatalf("prefill measurements %+v, want the 8-token prompt at depths 0 and 8", res.Prefill)
	}
	at8, err := plans(8, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Prefill[1].FlopsPerRun; got != at8.Totals.Flops {
		t.Errorf("8 tokens at depth 8: %d flops, want the chunk's at context 8 (%d)", got, at8.Totals.Flops)
	}
	if len(res.Prefill[1].Runs) != 2 {
		t.Errorf("%d timed runs at depth 8, want 2", len(res.Prefill[1].Runs))
	}
	if _, err := bench.Measure(context.Background(), m, bench.Spec{Prompts: []int{8}, Depths: []int{-1}, DecodeTokens: 1, Repeats: 1}); err == nil {
		t.Error("a negative depth was accepted")
	}
}
