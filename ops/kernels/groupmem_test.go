package kernels

import (
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

// The calculator counts what the kernels declare: the numbers a feasibility study found
// by hand for the CUDA tuning, and the smaller Metal tiles.
func TestGroupMemoryCountsTheDeclarations(t *testing.T) {
	want := map[string]map[string]int{
		"cuda":  {"matmul_tiled": 16896, "expert_tiled": 35140, "attention": 8256, "attention_gqa": 43076, "rms_norm": 128, "unary": 0},
		"metal": {"matmul_tiled": 16896, "expert_tiled": 26948, "attention": 8256, "attention_gqa": 24608, "argmax": 256},
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
