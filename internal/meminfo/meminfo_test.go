package meminfo

import (
	"runtime"
	"testing"
)

func TestParseAvailable(t *testing.T) {
	got, err := parseAvailable("MemTotal:       24684000 kB\nMemFree:         1717352 kB\nMemAvailable:   24087396 kB\nBuffers:            1024 kB\n")
	if err != nil || got != 24087396<<10 {
		t.Errorf("parseAvailable = %d, %v; want %d", got, err, int64(24087396)<<10)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemAvailable: lots\n", "MemAvailable: 12\n", "MemAvailable: -3 kB\n"} {
		if _, err := parseAvailable(bad); err == nil {
			t.Errorf("parseAvailable(%q) gave no error", bad)
		}
	}
}

// On Linux the real file parses and names a positive amount.
func TestAvailableOnThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/meminfo is Linux's")
	}
	got, err := Available()
	if err != nil || got <= 0 {
		t.Fatalf("Available() = %d, %v", got, err)
	}
}
