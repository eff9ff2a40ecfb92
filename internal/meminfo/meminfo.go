// Package meminfo reads how much memory the machine has available, for the checks that
// refuse or skip work that would not fit.
package meminfo

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Available is Linux's MemAvailable (/proc/meminfo) in bytes: free memory plus what the
// kernel can reclaim without swapping (most of the page cache). Elsewhere, or when the
// file cannot be read, it returns an error.
func Available() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseAvailable(string(data))
}

func parseAvailable(meminfo string) (int64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		rest, ok := strings.CutPrefix(line, "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/meminfo: MemAvailable line %q: want a number of kB", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("/proc/meminfo: MemAvailable line %q: want a number of kB", line)
		}
		return kb << 10, nil
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
