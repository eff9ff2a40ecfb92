package kernels

import (
	"strings"
	"testing"
)

// TestTuningMacros: the declarations found in the CUDA source, with their defaults, and
// the errors of [cuda] kernel_defines entries that are not NAME=integer of one of them.
func TestTuningMacros(t *testing.T) {
	m := TuningMacros()
	for name, want := range map[string]string{"MMA_UNGUARDED": "1", "MMA_FULL_TILES": "1", "MMA_PARTIAL_SUBTILES": "1", "MMA_WIDE_MIN_GROUPS": "3", "MMA_XPARTS": "3"} {
		if m[name] != want {
			t.Errorf("tuning macro %s: default %q, want %q (all: %v)", name, m[name], want, m)
		}
	}
	if _, ok := m["PZ_LATE_LOADS"]; ok {
		t.Errorf("PZ_LATE_LOADS (an #ifdef feature, [cuda] early_loads) listed as a tuning macro")
	}
	if name, v, err := ParseTuningDefine("MMA_UNGUARDED=0"); err != nil || name != "MMA_UNGUARDED" || v != 0 {
		t.Errorf("MMA_UNGUARDED=0: %q %d %v", name, v, err)
	}
	if err := CheckTuningDefines([]string{"MMA_UNGUARDED=0", "MMA_PARTIAL_SUBTILES=0"}); err != nil {
		t.Errorf("two defines: %v", err)
	}
	if err := CheckTuningDefines([]string{"MMA_UNGUARDED=0", "MMA_XPARTS=3", "MMA_UNGUARDED=1"}); err == nil || !strings.Contains(err.Error(), `kernel define "MMA_UNGUARDED=1": MMA_UNGUARDED is already set by "MMA_UNGUARDED=0"`) {
		t.Errorf("a name set twice: error %v", err)
	}
	for def, want := range map[string]string{
		"MMA_UNGUARDED":     "want NAME=VALUE",
		"NO_SUCH_MACRO=1":   `"NO_SUCH_MACRO" is not one of`,
		"MMA_UNGUARDED=off": "must be an integer",
		"mma_unguarded=0":   "is not one of",
		"MMA_UNGUARDED= 0":  "must be an integer",
		"=1":                "is not one of",
	} {
		if _, _, err := ParseTuningDefine(def); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", def, err, want)
		}
	}
}

// attention_prefill_mma's group memory as the host computes it: the kernel's
// static_assert holds the same two numbers, so the host's and the kernel's sizes agree.
func TestAttnMMAGroupMemory(t *testing.T) {
	if one, two := AttnMMAGroupMemoryFor(1), AttnMMAGroupMemoryFor(2); one != 91904 || two != 179456 {
		t.Errorf("AttnMMAGroupMemoryFor: %d and %d bytes, want 91,904 and 179,456 (attention_mma.k's static_assert)", one, two)
	}
	for _, c := range []struct{ limit, want int }{{232448, 179456}, {179456, 179456}, {166912, 91904}, {101376, 91904}} {
		if got := DynamicGroupMemory(KernelAttentionPrefillMMA, c.limit); got != c.want {
			t.Errorf("attention_prefill_mma under a limit of %d bytes: %d, want %d", c.limit, got, c.want)
		}
	}
}
