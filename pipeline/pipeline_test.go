package pipeline

import (
	"reflect"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/passes"
)

// The repository's pipeline.toml and Default must agree, so running without the file
// compiles exactly what the documented file says.
func TestRepositoryFileEqualsDefault(t *testing.T) {
	p, err := Load("../pipeline.toml")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if !reflect.DeepEqual(p.Phases, d.Phases) || !reflect.DeepEqual(p.Passes, d.Passes) || p.CPU != d.CPU || !reflect.DeepEqual(p.CUDA, d.CUDA) {
		t.Errorf("pipeline.toml %+v %v %+v differs from Default %+v %v %+v", p.Phases, p.Passes, p.CPU, d.Phases, d.Passes, d.CPU)
	}
	if q, err := Parse([]byte("[metal]\ntoken_handoff = false\n")); err != nil {
		t.Error(err)
	} else if q.Metal.TokenHandoff || q.Metal.InFlight != 2 {
		t.Errorf("[metal] with only token_handoff = false gives %+v", q.Metal)
	}
	if p.Attention != d.Attention || p.Attention.KeyBlockSplitFrom != passes.DefaultKeyBlockSplitFrom {
		t.Errorf("pipeline.toml [attention] %+v, Default %+v, want key_block_split_from = %d", p.Attention, d.Attention, passes.DefaultKeyBlockSplitFrom)
	}
	if p.State != d.State {
		t.Errorf("pipeline.toml [state] %+v differs from Default %+v", p.State, d.State)
	}
	if p.Metal != d.Metal {
		t.Errorf("pipeline.toml [metal] %+v differs from Default %+v", p.Metal, d.Metal)
	}
	if !p.CUDA.Graphs {
		t.Errorf("pipeline.toml [cuda] graphs = false; the default replays CUDA graphs")
	}
	cfg, err := p.PassConfig([]string{"check/on"})
	if err != nil || !cfg.Check || cfg.Off["fuse-dequant"] {
		t.Errorf("PassConfig: %+v %v", cfg, err)
	}
	ph, err := p.Phase("prefill", 0, 0)
	if err != nil || ph.Tokens != 512 || !ph.LastLogitsOnly || ph.Context != 4096 {
		t.Errorf("prefill phase %+v %v", ph, err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"[phases]\nprefill_chunk = 0":                                   "prefill_chunk",
		"[metal]\nencoder = \"fast\"":                                   "metal.encoder",
		"[metal]\nbarriers = \"none\"":                                  "metal.barriers",
		"[metal]\nin_flight = 3":                                        "metal.in_flight",
		"[phases]\ncompile = [\"train\"]":                               "unknown phase",
		"[phases]\nprefill_logits = \"some\"":                           "prefill_logits",
		"[passes]\nplan-memory = false":                                 "required",
		"[passes]\nfuse-everything = true":                              "unknown pass",
		"[cpu]\nworkers = -1":                                           "cpu.workers",
		"[cpu]\nthreads = 4":                                            "unknown keys: cpu.threads",
		"[cpu]\nkernels = \"turbo\"":                                    "cpu.kernels",
		"[cpu]\nactivations = \"int4\"":                                 "cpu.activations",
		"[cpu]\nattention_kernel = \"avx9\"":                            "cpu.attention_kernel",
		"[phases]\nprefill_chunk = \"big\"":                             "prefill_chunk",
		"[state]\nkv_cache = \"fp8\"":                                   "state.kv_cache",
		"[state]\nkv = \"bf16\"":                                        "unknown keys: state.kv",
		"[attention]\nkey_block_split_from = -1":                        "attention.key_block_split_from",
		"[attention]\nsplit_from = 1":                                   "unknown keys: attention.split_from",
		"[attention]\nkey_block_keys = 100":                             "attention.key_block_keys",
		"[attention]\nkey_block_keys = 0":                               "attention.key_block_keys",
		"[cuda]\nkernel_defines = [\"MMA_UNGUARDED\"]":                  "cuda.kernel_defines: kernel define \"MMA_UNGUARDED\": want NAME=VALUE",
		"[cuda]\nkernel_defines = [\"MMA_UNGUARDD=0\"]":                 "\"MMA_UNGUARDD\" is not one of the CUDA kernels' tuning macros",
		"[cuda]\nkernel_defines = [\"MMA_UNGUARDED=off\"]":              "the value of MMA_UNGUARDED must be an integer",
		"[cuda]\nkernel_defines = [\"MMA_XPARTS=3\", \"MMA_XPARTS=2\"]": "MMA_XPARTS is already set",
		"[phases\n": "",
	}
	for text, want := range cases {
		_, err := Parse([]byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
}

// TestPartialFile: a file holding only some tables or keys takes the defaults for the
// rest, and an unknown key anywhere is an error that names it.
func TestPartialFile(t *testing.T) {
	d := Default()
	for _, text := range []string{"", "[cpu]\nworkers = 1", "[cpu]\nint8_kernel = \"go\"", "[cpu]\nattention_kernel = \"go\"", "[cuda]\n", "[cuda]\nkernel_defines = [\"MMA_UNGUARDED=0\", \"MMA_PARTIAL_SUBTILES=0\"]", "[passes]\nfuse-dequant = false", "[phases]\nprefill_chunk = 64"} {
		p, err := Parse([]byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		want := Default()
		switch text {
		case "[cpu]\nworkers = 1":
			want.CPU.Workers = 1
		case "[cpu]\nint8_kernel = \"go\"":
			want.CPU.Int8Kernel = "go"
			if o, err := p.ExecOptions("cpu", nil); err != nil || o.Int8Kernel != "go" {
				t.Errorf("%q: ExecOptions %+v, %v: want Int8Kernel go", text, o, err)
			}
		case "[cpu]\nattention_kernel = \"go\"":
			want.CPU.AttentionKernel = "go"
			if o, err := p.ExecOptions("cpu", nil); err != nil || o.AttentionKernel != "go" {
				t.Errorf("%q: ExecOptions %+v, %v: want AttentionKernel go", text, o, err)
			}
		case "[cuda]\nkernel_defines = [\"MMA_UNGUARDED=0\", \"MMA_PARTIAL_SUBTILES=0\"]":
			want.CUDA.KernelDefines = []string{"MMA_UNGUARDED=0", "MMA_PARTIAL_SUBTILES=0"}
			if o, err := p.ExecOptions("cuda", nil); err != nil || !reflect.DeepEqual(o.KernelDefines, want.CUDA.KernelDefines) {
				t.Errorf("%q: ExecOptions %+v, %v: want KernelDefines %v", text, o, err, want.CUDA.KernelDefines)
			}
		case "[passes]\nfuse-dequant = false":
			want.Passes["fuse-dequant"] = false
		case "[phases]\nprefill_chunk = 64":
			want.Phases.PrefillChunk = 64
		}
		if !reflect.DeepEqual(p.Phases, want.Phases) || !reflect.DeepEqual(p.Passes, want.Passes) || p.CPU != want.CPU || !reflect.DeepEqual(p.CUDA, want.CUDA) {
			t.Errorf("%q: got %+v %v %+v %+v, want %+v %v %+v %+v", text, p.Phases, p.Passes, p.CPU, p.CUDA, want.Phases, want.Passes, want.CPU, want.CUDA)
		}
	}
	if len(d.Passes) == 0 || !d.Passes["fuse-dequant"] {
		t.Fatalf("a parse changed Default's map: %v", d.Passes)
	}
	for text, want := range map[string]string{
		"[cpu]\nworkers = 1\nthreds = 2": "unknown keys: cpu.threds",
		"[phase]\nprefill_chunk = 64":    "unknown keys: phase, phase.prefill_chunk",
		"chunk = 64":                     "unknown keys: chunk",
	} {
		if _, err := Parse([]byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
}

func TestServerTableIsTheServers(t *testing.T) {
	p, err := Parse([]byte(("[server]\naddr = \"127.0.0.1:8080\"\nmax_tokens = 4096\n")))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Addr      string `toml:"addr"`
		MaxTokens int    `toml:"max_tokens"`
	}
	if err := p.DecodeServer(&s); err != nil || s.Addr != "127.0.0.1:8080" || s.MaxTokens != 4096 {
		t.Errorf("server table %+v %v", s, err)
	}
	if err := Default().DecodeServer(&s); err != nil {
		t.Errorf("Default has no server table: %v", err)
	}
}

// The zero exec.Options (what tests and library callers without a file get) compile what
// the built-in pipeline compiles: the same chunk, no optional pass off, fast kernels.
func TestDefaultExecOptionsMatchTheRuntimeDefaults(t *testing.T) {
	o, err := Default().ExecOptions("cpu", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"cpu", "cuda", "metal"} {
		ob, err := Default().ExecOptions(backend, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ob.Chunk != exec.DefaultChunkFor(backend) {
			t.Errorf("%s: prefill chunk %d, exec.DefaultChunkFor %d", backend, ob.Chunk, exec.DefaultChunkFor(backend))
		}
	}
	for name, off := range o.Passes.Off {
		if off != passes.DefaultOff(name) {
			t.Errorf("pass %s is off=%v in the built-in pipeline but off=%v in the zero exec.Options", name, off, passes.DefaultOff(name))
		}
	}
	if o.Kernels != "fast" || o.Workers != 0 || !o.Graphs || o.Backend != "cpu" {
		t.Errorf("exec options %+v", o)
	}
	if _, err := Default().ExecOptions("cpu", []string{"no-such-pass/off"}); err == nil {
		t.Error("an unknown -pass flag was accepted")
	}
}

// The KV cache type reaches the runtime's options: bf16 or f32 as asked, and without the
// key the backend's own (graph.InvalidDType, which exec.DeclareGraph resolves).
func TestKVCacheSetting(t *testing.T) {
	for text, want := range map[string]graph.DType{
		"":                             graph.InvalidDType,
		"[state]\n":                    graph.InvalidDType,
		"[state]\nkv_cache = \"bf16\"": graph.BF16,
		"[state]\nkv_cache = \"f32\"":  graph.F32,
	} {
		p, err := Parse([]byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		for _, backend := range []string{"cpu", "cuda", "metal"} {
			o, err := p.ExecOptions(backend, nil)
			if err != nil || o.KVCache != want {
				t.Errorf("%q on %s: KV cache %v (%v), want %v", text, backend, o.KVCache, err, want)
			}
		}
	}
}

// [attention] key_block_split_from reaches the compiler: a context as given, 0 as never
// (passes.Config's negative), and the default without the key.
func TestKeyBlockSplitSetting(t *testing.T) {
	for text, want := range map[string]int{
		"": passes.DefaultKeyBlockSplitFrom,
		"[attention]\nkey_block_split_from = 8192": 8192,
		"[attention]\nkey_block_split_from = 0":    -1,
	} {
		p, err := Parse([]byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		o, err := p.ExecOptions("cuda", nil)
		if err != nil || o.Passes.KeyBlockSplitFrom != want || o.Passes.KeyBlockKeys != gpu.BlockSplitKeys {
			t.Errorf("%q: KeyBlockSplitFrom %d, KeyBlockKeys %d (%v), want %d and %d", text, o.Passes.KeyBlockSplitFrom, o.Passes.KeyBlockKeys, err, want, gpu.BlockSplitKeys)
		}
	}
	p, err := Parse([]byte("[attention]\nkey_block_keys = 32"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := p.PassConfig(nil); err != nil || cfg.KeyBlockKeys != 32 || cfg.KeyBlockSplitFrom != passes.DefaultKeyBlockSplitFrom {
		t.Errorf("key_block_keys = 32: config %+v (%v)", cfg, err)
	}
}
