//go:build linux

package cuda

import (
	"fmt"
	"math"
	"pistil/internal/fixtures"
	"strings"
	"testing"

	"pistil/exec"
	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/passes"
	"pistil/plan"
)

// A plan that was not compiled for CUDA (no kernel named per dispatch) is refused before
// the device is touched, saying how to compile one.
func TestLoadRefusesPlansOfOtherTargets(t *testing.T) {
	for _, p := range []*plan.Plan{
		{Phase: "decode", Backend: "cpu", Dispatches: []plan.Dispatch{{Op: "embed"}}},
		{Phase: "decode", Dispatches: []plan.Dispatch{{Op: "embed"}}},
	} {
		err := checkOps(p)
		if err == nil || !strings.Contains(err.Error(), "--backend cuda") {
			t.Errorf("plan for %q: error %v, want a refusal that says --backend cuda", p.Backend, err)
		}
	}
	err := checkOps(&plan.Plan{Phase: "decode", Backend: "cuda", Dispatches: []plan.Dispatch{{Op: "embed", Kernel: "embed"}, {Index: 1, Op: "rope"}}})
	if err == nil || !strings.Contains(err.Error(), "dispatch 1 (rope) names no kernel") {
		t.Errorf("a cuda plan with a dispatch lacking its kernel: error %v", err)
	}
	if err := checkOps(&plan.Plan{Backend: "cuda", Dispatches: []plan.Dispatch{{Op: "qmatmul", Kernel: "matvec_q4"}}}); err != nil {
		t.Errorf("a cuda plan was refused: %v", err)
	}
}

// Without a GPU, asking for the backend is a clean error that says CUDA is missing.
func TestOpenWithoutGPUFailsCleanly(t *testing.T) {
	if _, err := loadDriver(); err == nil {
		t.Skip("a CUDA device is present; this test is for machines without one")
	}
	_, err := exec.Open(fixtures.Path("golden/tiny-s1/mlx-q4"), exec.Options{Backend: "cuda"})
	if err == nil {
		t.Fatal("exec.Open with backend cuda succeeded without a GPU")
	}
	if !strings.Contains(err.Error(), "CUDA not available") {
		t.Errorf("error %q does not say CUDA is not available", err)
	}
}

// On a GPU, the program launches exactly the plan's dispatches: one launch per
// dispatch, in plan order, each the kernel with the grid and group size the plan names,
// and with CUDA graphs one graph node per dispatch. Nothing runs that the plan does not
// show (issue 8: no hidden stages).
func TestProgramLaunchesExactlyThePlan(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	for _, layout := range []string{"mlx-q4", "hf"} {
		m, err := exec.Open(fixtures.Golden(layout), exec.Options{Backend: "cuda", Graphs: true})
		if err != nil {
			t.Fatal(err)
		}
		// A full chunk, then pieces of 4, 2 and 1, then a decode step: every program
		// checked below has run, so its launches are bound to the session's state.
		s, err := m.NewSession(m.Chunk() + 16)
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]int32, m.Chunk()+7)
		for i := range prompt {
			prompt[i] = int32(i % 50)
		}
		if err := s.Prefill(t.Context(), prompt, exec.PrefillOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Decode(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
		for _, tokens := range []int{1, 4, m.Chunk()} {
			p, err := m.Plan(tokens)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := m.Program(tokens)
			if err != nil {
				t.Fatal(err)
			}
			cp := prog.(*program)
			if len(cp.launches) != len(p.Dispatches) {
				t.Fatalf("%s T=%d: %d launches for %d dispatches", layout, tokens, len(cp.launches), len(p.Dispatches))
			}
			dynamic := 0
			for i, l := range cp.launches {
				d := p.Dispatches[i]
				grid := [3]uint32{uint32(d.Grid[0]), uint32(d.Grid[1]), uint32(d.Grid[2])}
				if l.name != d.Kernel || l.grid != grid || l.block != uint32(d.Block) {
					t.Errorf("%s T=%d dispatch %d (%s): launches %s %v x%d, the plan says %s %v x%d", layout, tokens, i, d.Op, l.name, l.grid, l.block, d.Kernel, d.Grid, d.Block)
				}
				// A kernel with dynamic group memory gets its bytes with the launch (and
				// the graph node), the others none.
				if want := uint32(kernels.DynamicGroupMemory(l.name, cp.b.dev.groupMemoryLimit)); l.shared != want {
					t.Errorf("%s T=%d dispatch %d (%s): %s launched with %d bytes of dynamic group memory, want %d", layout, tokens, i, d.Op, l.name, l.shared, want)
				}
				if l.shared > 0 {
					dynamic++
				}
			}
			if tokens > 1 && dynamic == 0 {
				t.Errorf("%s T=%d: no launch with dynamic group memory (the prefill plan's attention_prefill_mma)", layout, tokens)
			}
			if cp.graph != 0 {
				var n uintptr
				if err := cp.b.dev.d.check("cuGraphGetNodes", cp.b.dev.d.cuGraphGetNodes(cp.graph, nil, &n)); err != nil {
					t.Fatal(err)
				}
				if int(n) != len(p.Dispatches) {
					t.Errorf("%s T=%d: the CUDA graph has %d nodes for %d dispatches", layout, tokens, n, len(p.Dispatches))
				}
			}
		}
		s.Close()
		m.Close()
	}
}

// TestProgrammaticEdgesKeepTheAnswer: graphs whose edges are programmatic dependencies
// (pipeline.toml [cuda] programmatic_launch) give bit for bit the logits of graphs with
// full dependencies, over a chunked prefill and decode steps (the decode graphs get the
// programmatic edges). The kernels are the same,
// so any difference is a read that ran before its write. Under cuda/emu (which reports
// compute capability 9.0 and has edge data) it checks the edges the backend builds; on
// a Hopper GPU, that the hardware's early launch keeps every read after its write. The
// kernels' early loads ([cuda] early_loads, on by default) read only what nothing before
// them in the step writes; with them off (every kernel waiting at entry) the logits are
// the same bits.
func TestProgrammaticEdgesKeepTheAnswer(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	run := func(programmatic, lateLoads bool) [][]float32 {
		m, err := exec.Open(fixtures.Golden("mlx-q4"), exec.Options{Backend: "cuda", Chunk: 16, Graphs: true, ProgrammaticLaunch: programmatic, LateLoads: lateLoads})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := m.Backend().(*Backend).programmaticEdges(); got != programmatic {
			t.Fatalf("programmatic edges %v with programmatic_launch %v (the device or driver lacks them?)", got, programmatic)
		}
		return stepLogits(t, m, 7, []int32{3, 4, 5, 6})
	}
	full := run(false, false)
	for _, v := range []struct {
		name      string
		lateLoads bool
	}{{"programmatic edges", false}, {"programmatic edges, early loads off", true}} {
		requireSameLogits(t, full, run(true, v.lateLoads), v.name, "full edges")
	}
}

// stepLogits prefills a session of m with a 23-token prompt (token i is stride·i mod 50)
// and decodes tokens, and returns the logits after the prefill and after each step.
func stepLogits(t *testing.T, m *exec.Model, stride int, tokens []int32) [][]float32 {
	t.Helper()
	s, err := m.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int32, 23)
	for i := range prompt {
		prompt[i] = int32(stride * i % 50)
	}
	if err := s.Prefill(t.Context(), prompt, exec.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	out := [][]float32{append([]float32(nil), s.Logits()...)}
	for _, tok := range tokens {
		if err := s.Decode(t.Context(), tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), s.Logits()...))
	}
	return out
}

// requireSameLogits stops t at the first logit of got (with what) that is not want's
// (with base) to the bit.
func requireSameLogits(t *testing.T, want, got [][]float32, what, base string) {
	t.Helper()
	for step := range want {
		for i := range want[step] {
			if want[step][i] != got[step][i] {
				t.Fatalf("step %d logit %d: %v with %s, %v with %s", step, i, got[step][i], what, want[step][i], base)
			}
		}
	}
}

// TestKernelDefinesKeepTheAnswer: the tuning macros of pipeline.toml [cuda]
// kernel_defines switch kernel variants that compute the same values, so a model opened
// with the prefill mma's bounds tests back (MMA_FULL_TILES=0, MMA_UNGUARDED=0) and every
// token sub-tile of its partial tiles multiplied (MMA_PARTIAL_SUBTILES=0) gives the
// default module's logits bit for bit over a prefill of 23 tokens in chunks of 32 (a
// partial wide tile, mma-split-k and expert-per-slot off so the matmuls run on
// matmul_mma_wide and the experts on expert_mma16) and decode steps; and a define that
// is not a tuning macro is refused by name.
func TestKernelDefinesKeepTheAnswer(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	cfg := passes.Config{Off: map[string]bool{"mma-split-k": true, "expert-per-slot": true}}
	run := func(defines []string) [][]float32 {
		m, err := exec.Open(fixtures.Golden("mlx-q4"), exec.Options{Backend: "cuda", Chunk: 32, Passes: cfg, KernelDefines: defines})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		b := m.Backend().(*Backend)
		if variant := b.funcs[kernels.KernelMatmulMMAWideQ4] != b.dev.funcs[kernels.KernelMatmulMMAWideQ4]; variant != (len(defines) > 0) {
			t.Fatalf("defines %q: the backend launches the default module's kernels: %v", defines, !variant)
		}
		return stepLogits(t, m, 5, []int32{11, 12, 13})
	}
	requireSameLogits(t, run(nil), run([]string{"MMA_FULL_TILES=0", "MMA_UNGUARDED=0", "MMA_PARTIAL_SUBTILES=0"}), "the tuning macros off", "the defaults")
	_, err := exec.Open(fixtures.Golden("mlx-q4"), exec.Options{Backend: "cuda", KernelDefines: []string{"MMA_UNGUARDED=0", "NO_SUCH_MACRO=1"}})
	if err == nil || !strings.Contains(err.Error(), `"NO_SUCH_MACRO" is not one of the CUDA kernels' tuning macros`) {
		t.Errorf("a define that is not a tuning macro: error %v", err)
	}
}

// TestBF16WideDecodeAttentionKeepsTheAnswer: decode attention over a bf16 cache with its
// 16-byte loads (AD_BF16_WIDE, the default: q's k-slots permuted, V's halves swapped
// between lanes, two tiles at a time) and with the 8-byte loads of before
// (AD_BF16_WIDE=0) each give the CPU backend's logits over the same bf16 cache within
// exact's 2e-3, over a prefill of 23 tokens and decode steps on the golden mlx-q4
// fixture; the two differ only in the order of the scores' float32 sums, so they agree
// with each other within 1e-4.
func TestBF16WideDecodeAttentionKeepsTheAnswer(t *testing.T) {
	if _, err := loadDriver(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dir := fixtures.Golden("mlx-q4")
	tokens := []int32{11, 12, 13, 14, 15}
	open := func(backend string, defines []string) [][]float32 {
		m, err := exec.Open(dir, exec.Options{Backend: backend, KVCache: graph.BF16, KernelDefines: defines})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if backend == "cuda" {
			b := m.Backend().(*Backend)
			if variant := b.funcs[kernels.KernelAttentionGQAMMA] != b.dev.funcs[kernels.KernelAttentionGQAMMA]; variant != (len(defines) > 0) {
				t.Fatalf("defines %q: the backend launches the default module's kernels: %v", defines, !variant)
			}
		}
		return stepLogits(t, m, 7, tokens)
	}
	ref := open("cpu", nil)
	wide := open("cuda", nil)
	narrow := open("cuda", []string{"AD_BF16_WIDE=0"})
	maxDiff := func(a, b [][]float32) float64 {
		d := 0.0
		for step := range a {
			for i := range a[step] {
				d = max(d, math.Abs(float64(a[step][i]-b[step][i])))
			}
		}
		return d
	}
	for _, c := range []struct {
		what   string
		a, b   [][]float32
		within float64
	}{
		{"wide loads against the CPU", wide, ref, 2e-3},
		{"narrow loads against the CPU", narrow, ref, 2e-3},
		{"wide against narrow loads", wide, narrow, 1e-4},
	} {
		d := maxDiff(c.a, c.b)
		t.Logf("%s: max abs logit difference %.3g", c.what, d)
		if d > c.within || math.IsNaN(d) {
			t.Errorf("%s: max abs logit difference %.3g, want <= %g", c.what, d, c.within)
		}
	}
}

// TestGroupMemoryShortGPU: on a GPU that gives a group less memory than a kernel of the
// default plans takes (the 101,376 bytes of sm_86 and sm_89 cards; CI runs it under
// cuda/emu with EMU_GROUP_MEMORY=101376, in a process of its own, since the device reads
// the limit when it opens), the device still opens (the module loads without that
// kernel's opt-in), a default plan is refused with an error that names the kernel, its
// bytes and the pass to switch off, and with that pass off the model runs and gives the
// CPU backend's answer. Skips on a GPU that gives the default kernels their memory.
func TestGroupMemoryShortGPU(t *testing.T) {
	g := openGPU(t)
	if g.groupMemoryLimit >= kernels.DeltaChunkGroupMemory {
		t.Skipf("this GPU gives a group %d bytes: every default kernel fits", g.groupMemoryLimit)
	}
	dir := fixtures.Golden("mlx-q4")
	_, err := exec.Open(dir, exec.Options{Backend: "cuda"})
	want := fmt.Sprintf("runs on %s, which needs %d bytes of group memory a group", kernels.KernelGatedDeltaChunked, kernels.DeltaChunkGroupMemory)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "-pass=chunked-delta/off") {
		t.Fatalf("the default plans on a GPU with %d bytes a group: error %v, want one containing %q and the pass to switch off", g.groupMemoryLimit, err, want)
	}
	cfg := passes.Config{Off: map[string]bool{"chunked-delta": true}}
	m, err := exec.Open(dir, exec.Options{Backend: "cuda", Passes: cfg})
	if err != nil {
		t.Fatalf("chunked-delta off: %v", err)
	}
	defer m.Close()
	ref, err := exec.Open(dir, exec.Options{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	got, wantLogits := stepLogits(t, m, 5, []int32{11, 12, 13}), stepLogits(t, ref, 5, []int32{11, 12, 13})
	for step := range wantLogits {
		for i, w := range wantLogits[step] {
			if d := math.Abs(float64(got[step][i] - w)); !(d <= 2e-3) {
				t.Fatalf("step %d logit %d: %v on the GPU, %v on the CPU", step, i, got[step][i], w)
			}
		}
	}
}

// Every kernel that takes its group memory at launch names the pass that puts a dispatch
// on it, for the refusal above.
func TestGroupMemoryKernelsNameTheirPass(t *testing.T) {
	for _, name := range kernels.CUDANames {
		if kernels.DynamicGroupMemory(name, 0) > 0 && groupMemoryPasses[name] == "" {
			t.Errorf("%s takes dynamic group memory, but groupMemoryPasses names no pass for it", name)
		}
	}
}
