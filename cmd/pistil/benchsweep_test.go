package main

import (
	"bufio"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchSweepCompareAndPlot: --sweep measures the published lengths that fit
// (--max-length caps them here), with alternating-order repeats; compare prints B/A at
// every point from the two reports' medians; the plots are PNG files.
func TestBenchSweepCompareAndPlot(t *testing.T) {
	out := silenceBench(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	sweepPNG, bothPNG := filepath.Join(dir, "sweep.png"), filepath.Join(dir, "both.png")
	err := runBench([]string{"--model", goldenMLX, "--workers", "1", "--sweep", "--max-length", "512", "--repeats", "2",
		"--decode-tokens", "2", "--json", a, "--plot", sweepPNG, "--log-level", "off"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "sweep over lengths [256 512]: 2 repeats in alternating order") {
		t.Errorf("header:\n%s", out.String())
	}
	rep, err := readBenchReport(a)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Settings.Method != "sweep" || len(rep.Prefill) != 2 || len(rep.Decode) != 2 || rep.Prefill[1].Tokens != 512 || rep.Decode[0].Context != 256 {
		t.Fatalf("sweep report %+v %+v %+v", rep.Settings, rep.Prefill, rep.Decode)
	}
	for _, m := range append(rep.Prefill, rep.Decode...) {
		if len(m.Runs) != 2 {
			t.Errorf("%+v: want 2 runs", m)
		}
	}
	if err := runBench([]string{"--model", goldenMLX, "--workers", "1", "--prompts", "256", "--contexts", "256,0", "--repeats", "1",
		"--decode-tokens", "2", "--json", b, "--log-level", "off"}); err != nil {
		t.Fatal(err)
	}
	repB, err := readBenchReport(b)
	if err != nil {
		t.Fatal(err)
	}

	out.Reset()
	if err := runBench([]string{"compare", a, b}); err != nil {
		t.Fatal(err)
	}
	ratios := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 5 && (f[0] == "prefill" || f[0] == "decode") && f[len(f)-1] != "B)" && f[len(f)-1] != "A)" && f[1] != "geometric" {
			r, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("line %q", sc.Text())
			}
			for _, field := range f[1:] {
				if _, err := strconv.Atoi(field); err == nil {
					ratios[f[0]+" "+field] = r
					break
				}
			}
		}
	}
	wantPrefill := repB.Prefill[0].MedianTPS / rep.Prefill[0].MedianTPS
	wantDecode := repB.Decode[0].MedianTPS / rep.Decode[0].MedianTPS
	// The table prints ratios to three decimals.
	if math.Abs(ratios["prefill 256"]-wantPrefill) > 5.01e-4 || math.Abs(ratios["decode 256"]-wantDecode) > 5.01e-4 || len(ratios) != 2 {
		t.Errorf("ratios %v, want prefill %.3f decode %.3f:\n%s", ratios, wantPrefill, wantDecode, out.String())
	}
	for _, want := range []string{"prefill  512 prompt", "(only A)", "at context 0", "(only B)", "geometric mean of B/A over 1 points"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare output lacks %q:\n%s", want, out.String())
		}
	}

	if err := runBench([]string{"plot", "-o", bothPNG, a, b}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{sweepPNG, bothPNG} {
		file, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(file)
		file.Close()
		if err != nil || cfg.Width < 400 || cfg.Height < 200 {
			t.Errorf("%s: %+v %v", f, cfg, err)
		}
	}

	for args, want := range map[string]string{
		"compare " + a:                   "usage: pistil bench compare A.json B.json",
		"compare " + a + " /nonexistent": "no such file",
		"compare " + a + " " + sweepPNG:  "not a pistil bench report",
		"plot":                           "usage: pistil bench plot",
		"--sweep --prompts 8 --model x":  "--sweep measures its own lengths",
		"--plot x.svg --model x":         "the plot is a PNG",
	} {
		if err := runBench(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
