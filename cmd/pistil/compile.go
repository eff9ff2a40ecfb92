package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pistil/exec"
	"pistil/graph"
	"pistil/models/checkpoint"
	"pistil/models/qwen35moe"
	"pistil/ops"
	"pistil/passes"
	"pistil/pipeline"
	"pistil/plan"
)

func init() {
	register(command{name: "compile", summary: "compile the model graph into per-phase plans and print their numbers", run: runCompile})
}

// compileFlags are the flags compile and dump share.
type compileFlags struct {
	model, pipelineFile string
	backend, kvCache    string
	chunk, context      int
	passes              passList
	o0                  bool
}

func (c *compileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "cpu", "the backend the plans are for: "+strings.Join(passes.TargetNames(), ", ")+" (its state types, and for a GPU its kernels)")
	fs.StringVar(&c.model, "model", "", "model directory: its checkpoint's weight types, or its config.json alone when it holds no weights (default: the built-in Qwen3.6-35B-A3B, MLX 4-bit)")
	fs.StringVar(&c.pipelineFile, "pipeline", "", "pipeline.toml to read (default: ./pipeline.toml if present, else built-in defaults)")
	fs.IntVar(&c.chunk, "chunk", 0, "prefill chunk size, the prefill plan's T (0: pipeline.toml's)")
	fs.StringVar(&c.kvCache, "kv-cache", "", kvCacheUsage)
	fs.IntVar(&c.context, "context", 0, "context length the reported costs assume (0: pipeline.toml's cost_context)")
	fs.Var(&c.passes, "pass", "pass switch NAME/on|off|time|dump, all/time, check/on; -pass=help lists the passes (repeatable)")
	fs.BoolVar(&c.o0, "O0", false, "required passes only: the correctness baseline")
}

// setup loads the pipeline and the model graph and resolves the pass configuration. It
// answers -pass=help by printing the pass list and returning errUsage.
func (c *compileFlags) setup(log io.Writer) (*pipeline.Pipeline, passes.Config, *graph.Graph, string, error) {
	file := c.pipelineFile
	if file == "" {
		if _, err := os.Stat("pipeline.toml"); err == nil {
			file = "pipeline.toml"
		}
	}
	pl, err := pipeline.Load(file)
	if err != nil {
		return nil, passes.Config{}, nil, "", err
	}
	flags := []string(c.passes)
	if c.o0 {
		flags = append([]string{"all/off"}, flags...)
	}
	cfg, err := pl.PassConfig(flags)
	if errors.Is(err, passes.ErrHelp) {
		fmt.Fprint(os.Stdout, passes.HelpText())
		return nil, passes.Config{}, nil, "", errUsage
	}
	if err != nil {
		return nil, passes.Config{}, nil, "", err
	}
	cfg.Log = log
	kv, err := kvCacheType(pl, c.kvCache)
	if err != nil {
		return nil, passes.Config{}, nil, "", err
	}
	g, desc, err := buildModelGraph(c.model, c.backend, kv)
	if err != nil {
		return nil, passes.Config{}, nil, "", err
	}
	if file == "" {
		file = "built-in defaults"
	}
	return pl, cfg, g, fmt.Sprintf("%s; backend %s; pipeline %s; %s", desc, c.backend, file, cfg.Describe()), nil
}

const kvCacheUsage = "KV cache element type: f32 or bf16 (half the KV bytes; default: pipeline.toml's [state] kv_cache, else the backend's)"

// kvCacheType is the KV cache type of --kv-cache (when given) over pl's [state] table,
// which it updates; graph.InvalidDType leaves the choice to the backend.
func kvCacheType(pl *pipeline.Pipeline, flag string) (graph.DType, error) {
	if flag != "" {
		pl.State.KVCache = flag
	}
	kv, err := pl.State.KVDType()
	if err != nil && flag != "" {
		return kv, fmt.Errorf("--kv-cache %q: want f32 or bf16", flag)
	}
	return kv, err
}

// buildModelGraph declares the graph from the built-in config, or from DIR: with the
// checkpoint's own weight types when DIR holds one (what exec.Open declares, so the plan
// printed is the plan that runs), else from DIR/config.json alone (MLX types when the
// config is quantized, else BF16). State types are the backend's (exec.DeclareGraph).
func buildModelGraph(dir, backend string, kv graph.DType) (*graph.Graph, string, error) {
	var cfg *qwen35moe.Config
	var wt func(string, graph.Shape) (graph.Type, error)
	var desc string
	switch {
	case dir == "":
		cfg = qwen35moe.Default()
		wt = qwen35moe.MLXWeightType(cfg)
		desc = "built-in Qwen3.6-35B-A3B config, MLX affine 4-bit weights (8-bit router gates)"
	case hasWeights(dir):
		ck, err := checkpoint.Open(dir)
		if err != nil {
			return nil, "", err
		}
		defer ck.Close()
		cfg, wt = ck.Config(), ck.WeightType
		desc = fmt.Sprintf("%s, the checkpoint's weight types", dir)
	default:
		var err error
		if cfg, err = qwen35moe.LoadConfig(dir); err != nil {
			return nil, "", err
		}
		if cfg.Quant != nil {
			wt = qwen35moe.MLXWeightType(cfg)
			desc = fmt.Sprintf("%s/config.json (no weights), MLX affine %d-bit weights (group %d)", dir, cfg.Quant.Bits, cfg.Quant.GroupSize)
		} else {
			wt = func(name string, logical graph.Shape) (graph.Type, error) {
				return graph.TensorType(graph.BF16, logical...), nil
			}
			desc = dir + "/config.json (no weights), BF16 weights"
		}
	}
	g, err := exec.DeclareGraph(cfg, wt, backend, kv, false)
	if err != nil {
		return nil, "", err
	}
	if kv != graph.InvalidDType {
		desc += fmt.Sprintf("; KV cache %s", kv)
	}
	return g, desc, nil
}

// hasWeights says whether dir holds a safetensors checkpoint (one file or shards).
func hasWeights(dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, m := range matches {
		if filepath.Base(m) != "reference.safetensors" {
			return true
		}
	}
	return false
}

// phaseList resolves --phase: one name, or all (the pipeline's compile list), for
// backend (whose prefill chunk a zero chunk means).
func phaseList(pl *pipeline.Pipeline, backend, which string, chunk, context int) ([]passes.Phase, error) {
	switch {
	case chunk < 0:
		return nil, fmt.Errorf("--chunk %d must not be negative", chunk)
	case context < 0:
		return nil, fmt.Errorf("--context %d must not be negative", context)
	}
	if chunk == 0 {
		chunk = pl.PrefillChunk(backend)
	}
	names := []string{which}
	if which == "all" || which == "" {
		names = pl.Phases.Compile
	}
	var out []passes.Phase
	for _, n := range names {
		ph, err := pl.Phase(n, chunk, context)
		if err != nil {
			return nil, fmt.Errorf("--phase: %w", err)
		}
		ph.Backend = backend
		out = append(out, ph)
	}
	return out, nil
}

// Memory bandwidths the roofline is printed for: a round low and high figure and the M5
// Max (the machine of the published reference numbers in DESIGN.md).
var rooflines = []struct {
	name string
	gbps float64
}{{"400 GB/s", 400}, {"614 GB/s (M5 Max)", 614}, {"800 GB/s", 800}}

// reportOut receives compile's report (tests silence it).
var reportOut io.Writer = os.Stdout

func runCompile(args []string) error {
	fs := newFlags("compile")
	var cf compileFlags
	cf.register(fs)
	phase := fs.String("phase", "all", "phase to compile: decode, prefill or all")
	out := fs.String("o", "", "write the plan as JSON to this file (one phase: the plan; several: an array of plans)")
	verbose := fs.Bool("v", false, "also print every dispatch, with barriers and their reasons")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	start := time.Now()
	pl, cfg, g, desc, err := cf.setup(os.Stderr)
	if err != nil {
		return err
	}
	phases, err := phaseList(pl, cf.backend, *phase, cf.chunk, cf.context)
	if err != nil {
		return err
	}
	fmt.Fprintf(reportOut, "pistil compile: %s\n", desc)
	var plans []*plan.Plan
	for _, ph := range phases {
		p, err := passes.Compile(g, ops.Default, ph, cfg)
		if err != nil {
			return err
		}
		plans = append(plans, p)
		printPlanReport(reportOut, p)
		if *verbose {
			fmt.Fprint(reportOut, p.Text())
		}
	}
	fmt.Fprintf(reportOut, "compiled %d phase(s) in %v\n", len(plans), time.Since(start).Round(time.Millisecond))
	if *out != "" {
		var data []byte
		if len(plans) == 1 {
			data, err = plan.Marshal(plans[0])
		} else {
			data, err = json.MarshalIndent(plans, "", " ")
		}
		if err != nil {
			return fmt.Errorf("encode plan: %w", err)
		}
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(reportOut, "wrote %s\n", *out)
	}
	return nil
}

// printPlanReport prints one phase's numbers, per token where that is what matters.
func printPlanReport(w io.Writer, p *plan.Plan) {
	t := p.Totals
	c := plan.Commas
	fmt.Fprintf(w, "\n%s: T=%d tokens per step; costs assume C=%d tokens of context\n", p.Phase, p.Tokens, p.Context)
	fmt.Fprintf(w, "  dispatches                %s\n", c(int64(t.Dispatches)))
	fmt.Fprintf(w, "  concurrent groups         %s (%s barriers)\n", c(int64(t.Groups)), c(int64(t.Barriers)))
	fmt.Fprintf(w, "  longest dependency chain  %s dispatches\n", c(int64(t.LongestChain)))
	fmt.Fprintf(w, "  scratch memory            %s\n", plan.Bytes(t.ScratchBytes))
	split := p.StateSplit()
	var parts []string
	for _, k := range []string{"recurrent_state", "conv_state"} {
		if split[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s B", k, c(split[k])))
		}
	}
	fmt.Fprintf(w, "  session state             %s fixed (%s) + KV %s B per context token\n",
		plan.Bytes(t.StateBytes), strings.Join(parts, ", "), c(t.KVBytesPerToken))
	perTok := func(n int64) float64 { return float64(n) / float64(max(p.Tokens, 1)) }
	fmt.Fprintf(w, "  weight bytes read         %s per step, %s B per token\n", plan.Bytes(t.WeightBytesRead), c(int64(perTok(t.WeightBytesRead))))
	fmt.Fprintf(w, "  all bytes moved           %s read + %s written per step (weights, state, KV at C, activations)\n",
		plan.Bytes(t.BytesRead), plan.Bytes(t.BytesWritten))
	var weightsOnly, all []string
	for _, r := range rooflines {
		bw := r.gbps * 1e9
		weightsOnly = append(weightsOnly, fmt.Sprintf("%.1f tok/s at %s", bw/perTok(t.WeightBytesRead), r.name))
		all = append(all, fmt.Sprintf("%.1f", bw/perTok(t.BytesRead+t.BytesWritten)))
	}
	fmt.Fprintf(w, "  bandwidth roofline        weights only: %s\n", strings.Join(weightsOnly, ", "))
	fmt.Fprintf(w, "                            all bytes moved: %s tok/s at the same bandwidths\n", strings.Join(all, " / "))
}
