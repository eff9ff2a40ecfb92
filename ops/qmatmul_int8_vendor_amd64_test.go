package ops

import (
	"os"
	"strings"
	"testing"
)

// isAMD reads the vendor CPUID gives, which /proc/cpuinfo prints as vendor_id on Linux;
// the one-row VNNI kernel's default prefetch distance follows it.
func TestInt8RowAheadFollowsTheVendor(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	var vendor string
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
			vendor = strings.TrimSpace(v)
			break
		}
	}
	if vendor == "" {
		t.Skip("/proc/cpuinfo names no vendor_id")
	}
	if got, want := isAMD(), vendor == "AuthenticAMD"; got != want {
		t.Fatalf("isAMD() = %v on a %s processor", got, vendor)
	}
	if _, ok := int8RowKernelSets["avx512vnni"]; !ok {
		return // no VNNI kernel: int8RowAhead is never read
	}
	want := int8RowNear
	if vendor == "AuthenticAMD" {
		want = int8RowFar
	}
	if int8RowAhead != want {
		t.Errorf("int8RowAhead = %d on a %s processor, want %d", int8RowAhead, vendor, want)
	}
}
