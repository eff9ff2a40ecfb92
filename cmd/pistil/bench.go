package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"pistil/bench"
	"pistil/exec"
	"pistil/passes"
	"pistil/pipeline"
	"pistil/plan"
)

func init() {
	register(command{name: "bench", summary: "measure prefill and decode tok/s over prompt and context lengths", run: runBench})
}

// benchOut receives bench's table (tests silence it).
var benchOut io.Writer = os.Stdout

// syntheticNote is printed and recorded with every result: speeds measured on a random
// checkpoint are not those of the real model in one respect that matters for an MoE.
const syntheticNote = "on a random (synthetic) checkpoint, e.g. from `pistil synth`, MoE routing is near uniform, " +
	"so experts are spread more evenly than with trained weights"

// benchReport is the JSON that --json writes: the setup and every raw measurement.
type benchReport struct {
	Machine struct {
		Backend    string `json:"backend"`
		Device     string `json:"device,omitempty"`
		GOMAXPROCS int    `json:"gomaxprocs"`
		GOOS       string `json:"goos"`
		GOARCH     string `json:"goarch"`
	} `json:"machine"`
	Model struct {
		Name string `json:"name"`
		Dir  string `json:"dir"`
	} `json:"model"`
	Pipeline struct {
		File      string   `json:"file,omitempty"`
		Passes    string   `json:"passes"`
		PassFlags []string `json:"pass_flags,omitempty"`
		Chunk     int      `json:"chunk"`
		// KVCache is [state] kv_cache (or --kv-cache); empty: the backend's own type.
		KVCache string `json:"kv_cache,omitempty"`
	} `json:"pipeline"`
	Settings struct {
		// Method is "points" (each length measured in turn) or "sweep" (alternating-order
		// repeats over every length, pistil bench --sweep).
		Method       string   `json:"method"`
		Dropped      []string `json:"dropped,omitempty"`
		Prompts      []int    `json:"prompts"`
		Contexts     []int    `json:"contexts"`
		Depths       []int    `json:"depths,omitempty"`
		DecodeTokens int      `json:"decode_tokens"`
		Repeats      int      `json:"repeats"`
		Warmup       int      `json:"warmup"`
		Seed         int      `json:"seed"`
	} `json:"settings"`
	// PageCache is how much of the checkpoint the page cache held in 2 MiB pages once
	// the model opened (the CPU backend on Linux; nil elsewhere): the CPU's int8-all
	// decode ran 1.2x slower through 4 KiB pages (cpu/README.md, session 13).
	PageCache *pageCacheSummary `json:"page_cache,omitempty"`
	Note      string            `json:"note"`
	Started   time.Time         `json:"started"`
	*bench.Result
}

func runBench(args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return benchCompare(args[1:], benchOut)
		case "plot":
			return benchPlot(args[1:])
		}
	}
	fs := newFlags("bench")
	var mf modelFlags
	mf.register(fs)
	prompts := fs.String("prompts", "256,1024,4096", "prompt lengths whose prefill is timed (comma-separated; empty: none)")
	contexts := fs.String("contexts", "0,4096", "context lengths decode is timed at (comma-separated; empty: none)")
	depths := fs.String("depths", "0", "context lengths each prompt is prefilled on top of, like llama-bench -d (comma-separated)")
	decodeTokens := fs.Int("decode-tokens", 32, "decode steps timed per run")
	repeats := fs.Int("repeats", 3, "timed runs per measurement (the table shows their median, min and max)")
	warmup := fs.Int("warmup", 1, "untimed runs before the timed ones (plans compile on first use)")
	jsonOut := fs.String("json", "", "write every raw measurement to this JSON file")
	sweep := fs.Bool("sweep", false, "the published method: prefill and decode at ten lengths 256..128K (those that fit the model, memory and --max-length), repeats in alternating order, medians")
	maxLength := fs.Int("max-length", 0, "with --sweep: leave out lengths above this (0: none)")
	plotOut := fs.String("plot", "", "draw prefill and decode tok/s against length into this PNG")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurements to this file (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a heap profile (every allocation of the measurements: go tool pprof -sample_index=alloc_space) to this file")
	opProfile := fs.Bool("op-profile", false, "after the table, each measurement's time by op: ms a token, share of the timed runs, and GB/s and GFLOP/s by the plan's counts (the CPU backend, whose dispatches run one at a time)")
	bandwidthMiB := fs.Int64("bandwidth-mib", bench.DefaultBandwidthBytes>>20, "buffer in MiB for measuring the streaming read bandwidth first and after each decode measurement (held for the run; 0: not measured)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sweep {
		flagsGiven := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { flagsGiven[f.Name] = true })
		if flagsGiven["prompts"] || flagsGiven["contexts"] || flagsGiven["depths"] {
			return errors.New("--sweep measures its own lengths; leave out --prompts, --contexts and --depths (use --max-length to cap them)")
		}
		*prompts, *contexts = "", ""
	}
	if *maxLength < 0 {
		return fmt.Errorf("--max-length %d must not be negative", *maxLength)
	}
	if *plotOut != "" && !strings.HasSuffix(strings.ToLower(*plotOut), ".png") {
		return fmt.Errorf("--plot %s: the plot is a PNG; name the file .png", *plotOut)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *opProfile && *sweep {
		return errors.New("--op-profile goes with measured points, not --sweep")
	}
	spec := bench.Spec{DecodeTokens: *decodeTokens, Repeats: *repeats, Warmup: *warmup, BandwidthBytes: *bandwidthMiB << 20, OpProfile: *opProfile}
	var err error
	if spec.Prompts, err = parseLengths("--prompts", *prompts); err != nil {
		return err
	}
	if spec.Contexts, err = parseLengths("--contexts", *contexts); err != nil {
		return err
	}
	if spec.Depths, err = parseLengths("--depths", *depths); err != nil {
		return err
	}
	// Check what needs no model first, so a typo does not wait for the weights to load.
	if *sweep {
		if err := (bench.Spec{Contexts: []int{0}, DecodeTokens: spec.DecodeTokens, Repeats: spec.Repeats, Warmup: spec.Warmup}).Validate(0); err != nil {
			return err
		}
	} else if err := spec.Validate(0); err != nil {
		return err
	}
	if err := mf.resolve(); err != nil {
		return err
	}
	if mf.chunk < 0 {
		return fmt.Errorf("--chunk %d must not be negative", mf.chunk)
	}
	if mf.backend != "cpu" {
		// The streaming loop reads host memory; against a GPU's decode its share says nothing.
		spec.BandwidthBytes = 0
		if *opProfile {
			return fmt.Errorf("--op-profile times the CPU backend's dispatches; the %s backend queues its kernels to run later, so time them with the device's profiler (cuda/README.md: Nsight Systems)", mf.backend)
		}
	}
	rep := &benchReport{Note: syntheticNote, Started: time.Now().UTC()}
	if err := describePipeline(rep, &mf); err != nil {
		return err
	}
	m, err := mf.openLogged(os.Stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if reports, _ := m.PageCache(); len(reports) > 0 {
		summary := summarizePageCache(reports)
		rep.PageCache = &summary
	}
	if !*sweep {
		if err := spec.Validate(m.Config().MaxPositionEmbeddings); err != nil {
			return err
		}
	}
	rep.Settings.Method = "points"
	var sweepSpec bench.SweepSpec
	if *sweep {
		lengths := bench.SweepLengths
		if *maxLength > 0 {
			lengths = slices.DeleteFunc(slices.Clone(lengths), func(n int) bool { return n > *maxLength })
		}
		avail, _ := availableMemory()
		kept, dropped := bench.Fit(lengths, spec.DecodeTokens, m.Config().MaxPositionEmbeddings, m.StateBytes, avail*8/10)
		if len(kept) == 0 {
			return fmt.Errorf("--sweep: no length fits (%s)", strings.Join(dropped, "; "))
		}
		spec.Prompts, spec.Contexts = kept, kept
		rep.Settings.Method, rep.Settings.Dropped = "sweep", dropped
		sweepSpec = bench.SweepSpec{Lengths: kept, DecodeTokens: spec.DecodeTokens, Repeats: spec.Repeats, Warmup: spec.Warmup > 0,
			Progress: func(repeat, index, length int) {
				fmt.Fprintf(os.Stderr, "sweep: repeat %d/%d, length %d (%d of %d)\n", repeat+1, spec.Repeats, length, index+1, len(kept))
			}}
	}
	if spec.Plans, err = benchPlans(&mf); err != nil {
		return err
	}
	rep.Machine.Backend = mf.backend
	if d, ok := m.Backend().(interface{ Device() string }); ok {
		rep.Machine.Device = d.Device()
	}
	rep.Machine.GOMAXPROCS = runtime.GOMAXPROCS(0)
	rep.Machine.GOOS, rep.Machine.GOARCH = runtime.GOOS, runtime.GOARCH
	rep.Model.Name, rep.Model.Dir = m.Name(), mf.dir
	rep.Pipeline.Chunk = m.Chunk()
	rep.Settings.Prompts, rep.Settings.Contexts, rep.Settings.Depths = spec.Prompts, spec.Contexts, spec.Depths
	rep.Settings.DecodeTokens, rep.Settings.Repeats, rep.Settings.Warmup = spec.DecodeTokens, spec.Repeats, spec.Warmup
	rep.Settings.Seed = bench.Seed
	printBenchHeader(benchOut, rep)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *sweep {
		rep.Result, err = bench.Sweep(ctx, m, sweepSpec)
	} else {
		rep.Result, err = bench.Measure(ctx, m, spec)
	}
	if err != nil {
		return err
	}
	printBenchTable(benchOut, rep)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encode the JSON report: %w", err)
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write the JSON report: %w", err)
		}
		fmt.Fprintf(benchOut, "raw measurements written to %s\n", *jsonOut)
	}
	if *plotOut != "" {
		if err := drawPlot(*plotOut, []*benchReport{rep}, []string{rep.Model.Name}); err != nil {
			return err
		}
		fmt.Fprintf(benchOut, "plot written to %s\n", *plotOut)
	}
	return nil
}

// benchPlans compiles the plans bench's roofline reads: the ones the model runs, with
// costs counted at the context asked for.
func benchPlans(mf *modelFlags) (func(tokens, context int) (*plan.Plan, error), error) {
	o, err := mf.options()
	if err != nil {
		return nil, err
	}
	return func(tokens, context int) (*plan.Plan, error) {
		oc := o
		oc.CostContext = context
		return exec.CompilePlan(mf.dir, oc, tokens)
	}, nil
}

// describePipeline records the pipeline file and the optional passes the model's plans
// are compiled with, resolved the way modelFlags.open resolves them.
func describePipeline(rep *benchReport, mf *modelFlags) error {
	file := mf.pipeline
	if file == "" {
		if _, err := os.Stat("pipeline.toml"); err == nil {
			file = "pipeline.toml"
		}
	}
	pipe, err := pipeline.Load(file)
	if err != nil {
		return err
	}
	cfg, err := pipe.PassConfig(mf.passes)
	if errors.Is(err, passes.ErrHelp) {
		fmt.Fprint(os.Stdout, passes.HelpText())
		return errUsage
	}
	if err != nil {
		return err
	}
	rep.Pipeline.File = file
	rep.Pipeline.Passes = cfg.Describe()
	rep.Pipeline.PassFlags = mf.passes
	if _, err := kvCacheType(pipe, mf.kvCache); err != nil {
		return err
	}
	rep.Pipeline.KVCache = pipe.State.KVCache
	return nil
}

// parseLengths reads a comma-separated list of token counts; an empty list is allowed
// (nothing of that kind is measured).
func parseLengths(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a whole number of tokens", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func printBenchHeader(w io.Writer, rep *benchReport) {
	device := rep.Machine.Device
	if device == "" {
		device = "(the backend does not describe its device)"
	}
	fmt.Fprintf(w, "pistil bench: backend %s, device %s, GOMAXPROCS %d, %s/%s\n",
		rep.Machine.Backend, device, rep.Machine.GOMAXPROCS, rep.Machine.GOOS, rep.Machine.GOARCH)
	pipeFile := rep.Pipeline.File
	if pipeFile == "" {
		pipeFile = "built-in defaults"
	}
	fmt.Fprintf(w, "model %s (%s); prefill chunk %d; pipeline %s; %s\n",
		rep.Model.Name, rep.Model.Dir, rep.Pipeline.Chunk, pipeFile, rep.Pipeline.Passes)
	if rep.Settings.Method == "sweep" {
		fmt.Fprintf(w, "sweep over lengths %v: %d repeats in alternating order (ascending, then descending), medians; prompt ids pseudo-random (seed %d); decode feeds greedy tokens\n",
			rep.Settings.Prompts, rep.Settings.Repeats, rep.Settings.Seed)
		for _, d := range rep.Settings.Dropped {
			fmt.Fprintf(w, "left out: %s\n", d)
		}
	} else {
		fmt.Fprintf(w, "%d warm-up + %d timed runs each; prompt ids pseudo-random (seed %d); decode feeds greedy tokens\n",
			rep.Settings.Warmup, rep.Settings.Repeats, rep.Settings.Seed)
	}
	fmt.Fprintf(w, "note: %s\n\n", rep.Note)
}

func printBenchTable(w io.Writer, rep *benchReport) {
	if bw := rep.Bandwidth; bw != nil {
		fmt.Fprintf(w, "streaming read bandwidth %.1f GB/s with %d threads (%.1f with one; %s loads, %d MiB buffer, best of %d)\n",
			bw.BytesPerSec/1e9, bw.Threads, bw.SingleThread/1e9, bw.Kernel, bw.BufferBytes>>20, bw.Passes)
	}
	if pc := rep.PageCache; pc != nil {
		fmt.Fprintf(w, "checkpoint in 2 MiB pages: %.2f of %.2f GB", float64(pc.HugeBytes)/1e9, float64(pc.Bytes)/1e9)
		if pc.FilesReread > 0 {
			fmt.Fprintf(w, " (%d files read again at open, %.1f s)", pc.FilesReread, pc.RereadSecs)
		}
		if pc.UncachedBytes > 0 {
			fmt.Fprintf(w, "; %.2f GB were not in the page cache at open and come in as they are read", float64(pc.UncachedBytes)/1e9)
		}
		fmt.Fprintln(w)
	}
	if rep.Bandwidth != nil || rep.PageCache != nil {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%-8s %-22s %12s %12s %12s  %s\n", "phase", "tokens", "median tok/s", "min", "max", "roofline (median)")
	for _, m := range rep.Prefill {
		roofline := "" // a --sweep has no roofline
		if m.FlopsPerRun > 0 {
			roofline = fmt.Sprintf("%.1f GFLOP/s", m.MedianGFLOPS)
		}
		fmt.Fprintf(w, "%-8s %-22s %12.1f %12.1f %12.1f  %s\n", "prefill", prefillLabel(m), m.MedianTPS, m.MinTPS, m.MaxTPS, roofline)
	}
	for _, m := range rep.Decode {
		roofline := ""
		if m.BytesPerToken > 0 {
			share := "bandwidth not measured"
			if m.BandwidthShare > 0 {
				// The share is of the higher of the two lines (bench.Measurement.BandwidthLine).
				share = fmt.Sprintf("%.0f%% of %.1f GB/s (line %.1f after these runs)", 100*m.BandwidthShare, m.BandwidthLine(rep.Bandwidth)/1e9, m.BandwidthAfter/1e9)
			}
			roofline = fmt.Sprintf("%s/token (weights %s), %s", decimalBytes(m.BytesPerToken), decimalBytes(m.WeightBytesPerToken), share)
		}
		fmt.Fprintf(w, "%-8s %-22s %12.1f %12.1f %12.1f  %s\n", "decode", fmt.Sprintf("%d at context %d", m.Tokens, m.Context),
			m.MedianTPS, m.MinTPS, m.MaxTPS, roofline)
	}
	fmt.Fprintf(w, "session capacity %d tokens\n", rep.Capacity)
	for _, m := range rep.Prefill {
		printOpProfile(w, "prefill "+prefillLabel(m), m)
	}
	for _, m := range rep.Decode {
		printOpProfile(w, fmt.Sprintf("decode %d at context %d", m.Tokens, m.Context), m)
	}
}

// printOpProfile writes a measurement's time by op (--op-profile), if it has one.
func printOpProfile(w io.Writer, title string, m bench.Measurement) {
	if len(m.Ops) == 0 {
		return
	}
	runs := 0.0
	for _, r := range m.Runs {
		runs += r.Seconds
	}
	fmt.Fprintf(w, "\n%s, by op (every timed run: %.1f ms a token; bytes and flops by the plan's count):\n", title, 1e3*runs/float64(len(m.Runs)*m.Tokens))
	fmt.Fprintf(w, "%-32s %10s %11s %7s %9s %9s\n", "op", "dispatches", "ms a token", "share", "GB/s", "GFLOP/s")
	for _, o := range m.Ops {
		fmt.Fprintf(w, "%-32s %10d %11.3f %6.1f%% %9.1f %9.1f\n", o.Op, o.Dispatches, 1e3*o.SecondsPerToken, 100*o.Share, o.GBPerSec, o.GFLOPS)
	}
	outside := 1 - m.OpsShare()
	fmt.Fprintf(w, "%-32s %10s %11.3f %6.1f%%\n", "(outside the dispatches)", "", 1e3*outside*runs/float64(len(m.Runs)*m.Tokens), 100*outside)
}

// prefillLabel names a prefill measurement: its prompt length, and its depth when the
// session was not empty.
func prefillLabel(m bench.Measurement) string {
	if m.Context == 0 {
		return fmt.Sprintf("%d prompt", m.Tokens)
	}
	return fmt.Sprintf("%d at depth %d", m.Tokens, m.Context)
}

// decimalBytes writes n in MB below a GB, else in GB (decimal units, like bandwidths).
func decimalBytes(n int64) string {
	if n < 1e9 {
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.3f GB", float64(n)/1e9)
}
