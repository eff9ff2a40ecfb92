package ops

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pistil/graph"
)

// cpuinfoField is the first value /proc/cpuinfo gives key (Linux), "" where it has none.
func cpuinfoField(t *testing.T, key string) string {
	t.Helper()
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// cpuFamily decodes the family of known CPUID signatures: the extended family counts
// only under base family 0xF.
func TestCPUFamilyOfSignatures(t *testing.T) {
	for _, c := range []struct {
		name string
		eax  uint32
		want int
	}{
		{"Zen 4 (EPYC 9004)", 0x00a10f11, 0x19},
		{"Zen 5 (EPYC 9005)", 0x00b00f21, 0x1a},
		{"Zen 2", 0x00830f10, 0x17},
		{"Sapphire Rapids", 0x000806f8, 6},
		{"an extended family under base 6 is not added", 0x0ff00600, 6},
	} {
		if got := cpuFamily(c.eax); got != c.want {
			t.Errorf("%s: cpuFamily(%#x) = %#x, want %#x", c.name, c.eax, got, c.want)
		}
	}
}

// isAMD and amdFamily read what CPUID gives, which /proc/cpuinfo prints as vendor_id and
// cpu family on Linux; the one-row VNNI kernel's prefetch distance and the AVX-512
// attention's prefetch level follow them.
func TestPrefetchTuningsFollowTheProcessor(t *testing.T) {
	vendor := cpuinfoField(t, "vendor_id")
	if vendor == "" {
		t.Skip("/proc/cpuinfo names no vendor_id")
	}
	amd := vendor == "AuthenticAMD"
	if got := isAMD(); got != amd {
		t.Fatalf("isAMD() = %v on a %s processor", got, vendor)
	}
	family := 0
	if amd {
		var err error
		if family, err = strconv.Atoi(cpuinfoField(t, "cpu family")); err != nil {
			t.Fatalf("/proc/cpuinfo's cpu family: %v", err)
		}
	}
	if got := amdFamily(); got != family {
		t.Fatalf("amdFamily() = %#x on a %s processor of family %#x", got, vendor, family)
	}
	if _, ok := int8RowKernelSets["avx512vnni"]; ok {
		want := int8RowNear
		if family >= int8RowFarFamily {
			want = int8RowFar
		}
		if int8RowAhead != want {
			t.Errorf("int8RowAhead = %d on a %s processor of family %#x, want %d", int8RowAhead, vendor, family, want)
		}
	}
	if slices.Contains(attnKernelSets, avx512AttnKernels) {
		if want := family == attnL2AheadFamily; attnAheadToL2 != want {
			t.Errorf("attnAheadToL2 = %v on a %s processor of family %#x, want %v", attnAheadToL2, vendor, family, want)
		}
	}
}

// The AVX-512 value passes' fetches into the L2 (attnAheadToL2) and into the L1
// ("avx512-l1") sum the same bits: decode-shaped calls whose rows are fetched ahead
// (8 query rows of a KV head, rows of 512 bytes or more), float32 and bf16 caches, on one
// and two workers. Both branches run on every machine, whichever this one takes.
func TestAttentionAheadLevelsSumTheSameBits(t *testing.T) {
	if !slices.Contains(attnKernelSets, avx512AttnKernels) {
		t.Skip("no AVX-512 attention kernels on this machine")
	}
	oldFast, oldL2 := attnFast, attnAheadToL2
	defer func() { attnFast, attnAheadToL2 = oldFast, oldL2 }()
	for _, c := range []attnCase{
		{T: 1, C: 5000, NH: 16, KVH: 2, D: 256},
		{T: 1, C: 700, NH: 16, KVH: 2, D: 128},
		{T: 1, C: 2000, NH: 16, KVH: 2, D: 256, dt: graph.BF16},
	} {
		for _, workers := range []int{1, 2} {
			t.Run(fmt.Sprintf("C%d_D%d_%v_w%d", c.C, c.D, c.dt, workers), func(t *testing.T) {
				attnFast = avx512L1AttnKernels
				want := runAttention(t, c, 7, KernelsFast, workers)
				attnFast, attnAheadToL2 = avx512AttnKernels, true
				got := runAttention(t, c, 7, KernelsFast, workers)
				near(t, "attention fetching ahead into the L2", got, want, 0)
			})
		}
	}
}
