package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// readBenchReport reads a JSON report that pistil bench --json wrote.
func readBenchReport(path string) (*benchReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep benchReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: not a pistil bench report: %w", path, err)
	}
	if rep.Result == nil || (len(rep.Prefill) == 0 && len(rep.Decode) == 0) {
		return nil, fmt.Errorf("%s: the report holds no measurements", path)
	}
	return &rep, nil
}

// describeReport names what a report measured, for compare's header.
func describeReport(rep *benchReport) string {
	device := rep.Machine.Device
	if device == "" {
		device = rep.Machine.Backend
	}
	return fmt.Sprintf("%s on %s (%s), %s, %s", rep.Model.Name, device, rep.Machine.Backend, rep.Settings.Method, rep.Pipeline.Passes)
}

// benchCompare prints B's median over A's at every point both reports measured, and
// the geometric mean of the ratios per phase.
func benchCompare(args []string, w io.Writer) error {
	if len(args) != 2 || strings.HasPrefix(args[0], "-") {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(w, "usage: pistil bench compare A.json B.json\n\nprints B's median tok/s over A's at every prompt length and context both measured")
			return nil
		}
		return errors.New("usage: pistil bench compare A.json B.json (two reports from pistil bench --json)")
	}
	a, err := readBenchReport(args[0])
	if err != nil {
		return err
	}
	b, err := readBenchReport(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "A: %s: %s\nB: %s: %s\n\n", args[0], describeReport(a), args[1], describeReport(b))
	fmt.Fprintf(w, "%-8s %-16s %12s %12s %8s\n", "phase", "tokens", "A tok/s", "B tok/s", "B/A")
	for _, phase := range []string{"prefill", "decode"} {
		am, bm := pointsOf(a, phase), pointsOf(b, phase)
		logSum, n := 0.0, 0
		for _, p := range am {
			label := pointLabel(phase, p.length)
			q, ok := findPoint(bm, p.length)
			if !ok {
				fmt.Fprintf(w, "%-8s %-16s %12.1f %12s %8s\n", phase, label, p.median, "-", "(only A)")
				continue
			}
			ratio := q.median / p.median
			fmt.Fprintf(w, "%-8s %-16s %12.1f %12.1f %8.3f\n", phase, label, p.median, q.median, ratio)
			if ratio > 0 && !math.IsInf(ratio, 0) {
				logSum += math.Log(ratio)
				n++
			}
		}
		for _, q := range bm {
			if _, ok := findPoint(am, q.length); !ok {
				fmt.Fprintf(w, "%-8s %-16s %12s %12.1f %8s\n", phase, pointLabel(phase, q.length), "-", q.median, "(only B)")
			}
		}
		if n > 0 {
			fmt.Fprintf(w, "%-8s geometric mean of B/A over %d points: %.3f\n", phase, n, math.Exp(logSum/float64(n)))
		}
	}
	return nil
}

type benchPoint struct {
	length int
	median float64
}

// pointsOf lists a phase's medians by length: the prompt length for prefill, the context
// for decode.
func pointsOf(rep *benchReport, phase string) []benchPoint {
	var out []benchPoint
	if phase == "prefill" {
		for _, m := range rep.Prefill {
			out = append(out, benchPoint{m.Tokens, m.MedianTPS})
		}
	} else {
		for _, m := range rep.Decode {
			out = append(out, benchPoint{m.Context, m.MedianTPS})
		}
	}
	return out
}

func findPoint(ps []benchPoint, length int) (benchPoint, bool) {
	for _, p := range ps {
		if p.length == length {
			return p, true
		}
	}
	return benchPoint{}, false
}

// benchPlot draws one or more reports into a PNG: pistil bench plot -o F.png A.json [B.json ...].
func benchPlot(args []string) error {
	fs := newFlags("bench plot")
	out := fs.String("o", "bench.png", "the PNG to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: pistil bench plot [-o FILE.png] A.json [B.json ...]")
	}
	var reps []*benchReport
	var labels []string
	for _, path := range fs.Args() {
		rep, err := readBenchReport(path)
		if err != nil {
			return err
		}
		reps = append(reps, rep)
		labels = append(labels, strings.TrimSuffix(baseName(path), ".json"))
	}
	if err := drawPlot(*out, reps, labels); err != nil {
		return err
	}
	fmt.Fprintf(benchOut, "plot written to %s\n", *out)
	return nil
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// drawPlot draws prefill and decode tok/s against length (tokens of prompt, or of
// context) on log-log axes, one pair of lines per report.
func drawPlot(path string, reps []*benchReport, labels []string) error {
	p := plot.New()
	p.Title.Text = "pistil bench: median tok/s"
	p.X.Label.Text = "prompt length (prefill) / context length (decode), tokens"
	p.Y.Label.Text = "tokens per second"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = powerOfTwoTicks{}, oneTwoFiveTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	var lines []any
	for i, rep := range reps {
		for _, phase := range []string{"prefill", "decode"} {
			var xy plotter.XYs
			for _, pt := range pointsOf(rep, phase) {
				// A log axis has no zero: decode at an empty context is drawn at 1 token.
				x := math.Max(float64(pt.length), 1)
				if pt.median > 0 {
					xy = append(xy, plotter.XY{X: x, Y: pt.median})
				}
			}
			if len(xy) > 0 {
				lines = append(lines, labels[i]+" "+phase, xy)
			}
		}
	}
	if len(lines) == 0 {
		return errors.New("plot: nothing to draw")
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

func pointLabel(phase string, length int) string {
	if phase == "decode" {
		return fmt.Sprintf("at context %d", length)
	}
	return fmt.Sprintf("%d prompt", length)
}

// powerOfTwoTicks label the lengths a sweep measures (256, 512, 1K ... 128K).
type powerOfTwoTicks struct{}

func (powerOfTwoTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for v := 1.0; v <= hi*1.0001; v *= 2 {
		if v < lo*0.9999 {
			continue
		}
		label := fmt.Sprintf("%.0f", v)
		if v >= 1024 {
			label = fmt.Sprintf("%.0fK", v/1024)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// oneTwoFiveTicks label a log axis at 1, 2 and 5 times each power of ten.
type oneTwoFiveTicks struct{}

func (oneTwoFiveTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for decade := math.Pow(10, math.Floor(math.Log10(lo))); decade <= hi; decade *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * decade
			if v >= lo*0.9999 && v <= hi*1.0001 {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconvG(v)})
			} else if m == 1 {
				ticks = append(ticks, plot.Tick{Value: v}) // a minor tick keeps the scale readable
			}
		}
	}
	return ticks
}

func strconvG(v float64) string { return fmt.Sprintf("%g", v) }
