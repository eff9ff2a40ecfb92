package kernels

import (
	"regexp"
	"strings"
	"testing"
)

// Every kernel's group memory fits its backend: Metal gives a threadgroup 32 KiB.
func TestGroupMemoryWithinEachBackend(t *testing.T) {
	for _, tune := range []Tuning{CUDA, Metal} {
		gms, err := GroupMemoryOf(tune)
		if err != nil {
			t.Fatal(err)
		}
		if len(gms) != len(Names)+1 {
			t.Errorf("%s: %d kernels measured, want %d (Names and the probe)", tune.Backend, len(gms), len(Names)+1)
		}
		for _, gm := range gms {
			if gm.Padded > tune.GroupMemoryLimit {
				t.Errorf("%s: %s declares %d bytes of group memory (%d padded), over the %d the backend allows",
					tune.Backend, gm.Kernel, gm.Bytes, gm.Padded, tune.GroupMemoryLimit)
			}
		}
	}
}

// The calculator counts what the kernels declare, worked out by hand: matmul_tiled
// 32·65·4·2 + 64·4; expert_tiled 32·129·4 + 32·17·4 + slots·4 + 16·4 + 4; attention_gqa
// keys·257·4 + keys·256·4 + 8·256·4 (16 keys on CUDA, 8 on Metal); attention_merge
// 3·512·4 (the fixed-block key split's most ranges).
// (A feasibility study counted 35,140 and 43,076 for CUDA's expert_tiled and
// attention_gqa; the second has since lost its merge's 2,052 bytes to attention_merge.)
func TestGroupMemoryCountsTheDeclarations(t *testing.T) {
	want := map[string]map[string]int{
		"cuda": {"matmul_tiled": 16896, "expert_tiled": 35140, "attention": 8256, "attention_gqa": 41024, "attention_merge": 6144,
			"rms_norm": 128, "unary": 0},
		"metal": {"matmul_tiled": 16896, "expert_tiled": 26948, "attention": 8256, "attention_gqa": 24608, "attention_merge": 6144, "argmax": 256},
	}
	for _, tune := range []Tuning{CUDA, Metal} {
		gms, err := GroupMemoryOf(tune)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, gm := range gms {
			got[gm.Kernel] = gm.Bytes
		}
		for k, w := range want[tune.Backend] {
			if got[k] != w {
				t.Errorf("%s %s: %d bytes, want %d", tune.Backend, k, got[k], w)
			}
		}
	}
}

// Bigger Metal tiles would not fit: the check is not vacuous.
func TestGroupMemoryCatchesAnOversizedTile(t *testing.T) {
	big := Metal
	big.AttnTileKeys = CUDA.AttnTileKeys
	gms, err := GroupMemoryOf(big)
	if err != nil {
		t.Fatal(err)
	}
	for _, gm := range gms {
		if gm.Kernel == KernelAttentionGQA && gm.Padded <= Metal.GroupMemoryLimit {
			t.Errorf("attention_gqa with %d-key tiles: %d bytes, expected over 32 KiB", big.AttnTileKeys, gm.Padded)
		}
	}
}

func TestPreprocessorEvaluatesConditions(t *testing.T) {
	m, err := preprocess("#define A 3\n#define B (A * 2 + 1)\n#if !A\nx\n#else\ny\n#endif\n#if B % 7\nz\n#endif\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(m.text) != "y" {
		t.Errorf("active text %q, want y", strings.TrimSpace(m.text))
	}
	if v, err := m.eval("B * 2 - A"); err != nil || v != 11 {
		t.Errorf("B*2-A = %d, %v; want 11", v, err)
	}
	for _, bad := range []string{"C + 1", "A +", "A ? 1 : 2", "(A"} {
		if _, err := m.eval(bad); err == nil {
			t.Errorf("eval(%q) gave no error", bad)
		}
	}
	if _, err := preprocess("#if 1\nx\n"); err == nil {
		t.Error("an unterminated #if gave no error")
	}
}

// Every TG_MEM_DYNAMIC of the CUDA source is `extern __shared__ T name[]` there, and all
// such declarations of one module are the same symbol: two kernels that declare one name
// with different element types do not compile (NVRTC: "declaration is incompatible"),
// which cuda/emu, where each is a static array, cannot show.
func TestDynamicGroupMemoryNamesKeepOneType(t *testing.T) {
	decl := regexp.MustCompile(`TG_MEM_DYNAMIC\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*,`)
	src := CUDASource()
	types := map[string]string{}
	n := 0
	for _, m := range decl.FindAllStringSubmatch(src, -1) {
		typ, name := m[1], m[2]
		if typ == "T" && name == "name" {
			continue // the macro's own definition
		}
		n++
		if prev, ok := types[name]; ok && prev != typ {
			t.Errorf("dynamic group memory %s declared as %s and as %s: one extern symbol in a module, so one type", name, prev, typ)
		}
		types[name] = typ
	}
	if n < 3 {
		t.Fatalf("found %d TG_MEM_DYNAMIC declarations in the CUDA source, want the dynamic-memory kernels' (at least 3)", n)
	}
}
