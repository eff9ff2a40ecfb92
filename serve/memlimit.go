package serve

import (
	"bytes"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
)

// The Go memory limit (debug.SetMemoryLimit) makes the garbage collector work harder as
// the Go heap nears it, so that bursts of request preparation give memory back instead of
// growing the process until the machine swaps or the OOM killer ends it. The weights are
// mapped files, outside the Go heap and outside the limit.
//
// Default: what the process holds once the model is loaded plus half of the memory left
// on the machine (the smaller of physical memory and the cgroup's limit). GOMEMLIMIT in
// the environment wins, as the Go runtime documents; Config.MemoryLimit sets it outright
// (negative: leave the runtime's setting alone).

// applyMemoryLimit sets the limit and returns it (0: left alone).
func (s *Server) applyMemoryLimit() int64 {
	limit := s.cfg.MemoryLimit
	switch {
	case limit < 0 || os.Getenv("GOMEMLIMIT") != "":
		return 0
	case limit == 0:
		total := machineMemory()
		if total == 0 {
			return 0
		}
		held := goMemory()
		limit = held + max(total-held, 0)/2
		limit = max(limit, held+256<<20)
	}
	debug.SetMemoryLimit(limit)
	return limit
}

// goMemory is the memory the Go runtime has mapped (heap, stacks, metadata).
func goMemory() int64 {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}}
	rtmetrics.Read(sample)
	if sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}

// machineMemory is the memory this process may use: physical memory, or the cgroup's
// limit when lower. 0 when neither can be read.
func machineMemory() int64 {
	total := physicalMemory()
	if c := cgroupLimit(); c > 0 && (total == 0 || c < total) {
		total = c
	}
	return total
}

// cgroupLimit reads cgroup v2's memory.max, then v1's limit_in_bytes (0: none).
func cgroupLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
		if err == nil && n > 0 && n < 1<<60 { // v1 says "no limit" with a huge number
			return n
		}
	}
	return 0
}
