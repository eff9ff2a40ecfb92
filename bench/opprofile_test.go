package bench_test

import (
	"context"
	"math"
	"testing"

	"pistil/bench"
	"pistil/plan"
)

// TestMeasureOpProfile: with OpProfile every measurement carries its time by op, and
// the op table agrees with the plans: each op of the plan once, with the plan's number of
// its dispatches, and bytes a token that add up to the plans' totals over the timed steps.
// opProfile fails unless every plan ran exactly the steps of the timed runs, so the
// warm-up run here (untimed) would fail the test if its dispatches were counted.
func TestMeasureOpProfile(t *testing.T) {
	m, plans := goldenModel(t)
	spec := bench.Spec{Prompts: []int{16}, Contexts: []int{0, 8}, DecodeTokens: 4, Repeats: 2, Warmup: 1, Plans: plans, OpProfile: true}
	res, err := bench.Measure(context.Background(), m, spec)
	if err != nil {
		t.Fatal(err)
	}
	// stepBytes is what a step of the plan of tokens tokens at context c reads and writes.
	stepBytes := func(tokens, c int) (float64, *plan.Plan) {
		p, err := plans(tokens, c)
		if err != nil {
			t.Fatal(err)
		}
		return float64(p.Totals.BytesRead + p.Totals.BytesWritten), p
	}
	check := func(name string, meas bench.Measurement, want float64, p *plan.Plan) {
		t.Helper()
		count := map[string]int{}
		for _, d := range p.Dispatches {
			count[d.Op]++
		}
		if len(meas.Ops) != len(count) {
			t.Errorf("%s: %d ops in the profile, the plan has %d", name, len(meas.Ops), len(count))
		}
		got, share := 0.0, 0.0
		for i, o := range meas.Ops {
			if o.Dispatches != count[o.Op] {
				t.Errorf("%s: %s with %d dispatches, the plan has %d", name, o.Op, o.Dispatches, count[o.Op])
			}
			if o.SecondsPerToken < 0 || o.Share < 0 || (o.SecondsPerToken > 0 && o.BytesPerToken > 0 && o.GBPerSec <= 0) {
				t.Errorf("%s: %+v", name, o)
			}
			if i > 0 && o.SecondsPerToken > meas.Ops[i-1].SecondsPerToken {
				t.Errorf("%s: %s after %s is longer", name, o.Op, meas.Ops[i-1].Op)
			}
			got += float64(o.BytesPerToken)
			share += o.Share
		}
		// Each op's bytes a token are rounded down, so the sum may fall short by an op count.
		if got > want || got < want-float64(len(meas.Ops)) {
			t.Errorf("%s: the ops read and write %.0f bytes a token, the plans %.0f", name, got, want)
		}
		if share <= 0 || share > 1 || math.Abs(share-meas.OpsShare()) > 1e-12 {
			t.Errorf("%s: the ops take %v of the timed runs (OpsShare %v)", name, share, meas.OpsShare())
		}
	}
	for _, d := range res.Decode {
		// Steps at contexts c .. c+3; an empty context's first step is token 0's one-token
		// prefill, the decode plan at context 0 (plans(1, 0) would be the default context).
		sum := 0.0
		var p *plan.Plan
		for c := d.Context; c < d.Context+4; c++ {
			var b float64
			if c == 0 {
				b1, _ := stepBytes(1, 1)
				b2, _ := stepBytes(1, 2)
				b = 2*b1 - b2
			} else {
				b, p = stepBytes(1, c)
			}
			sum += b
		}
		check("decode", d, sum/4, p)
	}
	// 16 tokens are two 8-token chunks at contexts 0 and 8.
	b8, p := stepBytes(8, 8)
	b16, _ := stepBytes(8, 16)
	check("prefill", res.Prefill[0], (2*b8-b16+b8)/16, p)
}
