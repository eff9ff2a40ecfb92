package bench

import (
	"context"
	"slices"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/internal/fixtures"

	_ "pistil/cpu"
)

func TestPieceSizes(t *testing.T) {
	// 1300 = 2*512 + 256 + 16 + 4
	if got := pieceSizes([]int{256, 512, 1024, 1300}, 512); !slices.Equal(got, []int{4, 16, 256, 512}) {
		t.Errorf("pieces %v", got)
	}
	if got := pieceSizes([]int{7}, 4); !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("pieces %v", got)
	}
}

func TestFit(t *testing.T) {
	state := func(c int) int64 { return int64(c) * 1000 }
	kept, dropped := Fit(SweepLengths, 32, 65536+32, state, 40_000_000)
	if !slices.Equal(kept, SweepLengths[:8]) { // 32768+32 tokens of state fit 40 MB; 65536 does not
		t.Errorf("kept %v", kept)
	}
	if len(dropped) != 2 || !strings.Contains(dropped[0], "65536 (its state") || !strings.Contains(dropped[1], "131072 (past the model's maximum context") {
		t.Errorf("dropped %v", dropped)
	}
}

// TestSweepOnTinyModel sweeps a few lengths on the golden tiny model: every length gets
// Repeats runs of both phases, medians lie within the runs, and errors name the length.
func TestSweepOnTinyModel(t *testing.T) {
	m, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cpu", Workers: 1, Chunk: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var order []int
	res, err := Sweep(context.Background(), m, SweepSpec{Lengths: []int{8, 32, 20}, DecodeTokens: 3, Repeats: 4, Warmup: true,
		Progress: func(repeat, index, length int) { order = append(order, length) }})
	if err != nil {
		t.Fatal(err)
	}
	// Ascending, descending, ascending, descending.
	if want := []int{8, 20, 32, 32, 20, 8, 8, 20, 32, 32, 20, 8}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if res.Capacity != 35 || len(res.Prefill) != 3 || len(res.Decode) != 3 {
		t.Fatalf("result %+v", res)
	}
	for i, n := range []int{8, 20, 32} {
		p, d := res.Prefill[i], res.Decode[i]
		if p.Tokens != n || d.Context != n || d.Tokens != 3 || len(p.Runs) != 4 || len(d.Runs) != 4 {
			t.Errorf("length %d: prefill %+v decode %+v", n, p, d)
		}
		for _, meas := range []Measurement{p, d} {
			if !(meas.MinTPS > 0 && meas.MinTPS <= meas.MedianTPS && meas.MedianTPS <= meas.MaxTPS) {
				t.Errorf("length %d: min %v median %v max %v", n, meas.MinTPS, meas.MedianTPS, meas.MaxTPS)
			}
		}
	}
	if _, err := Sweep(context.Background(), m, SweepSpec{Lengths: []int{300000}, DecodeTokens: 1, Repeats: 1}); err == nil || !strings.Contains(err.Error(), "300000") {
		t.Errorf("too long: %v", err)
	}
	if _, err := Sweep(context.Background(), m, SweepSpec{Lengths: []int{8}, DecodeTokens: 1, Repeats: 0}); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("no repeats: %v", err)
	}
}
