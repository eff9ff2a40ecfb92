package cpu

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Close implements exec.Backend: the CPU backend holds nothing beyond its programs and
// states, which the model closes itself.
func (b *Backend) Close() error { return nil }

// Close drops the program's scratch arena, outputs and weight references, so their
// memory is freed even while the program value is still referenced.
func (p *program) Close() error {
	p.closed = true
	p.steps, p.weights, p.arena, p.outBufs = nil, nil, nil, nil
	return nil
}

var errProgramClosed = errors.New("cpu: the program is closed")

// FreeMemory implements exec.MemoryReporter: MemAvailable of /proc/meminfo (Linux; an
// error elsewhere).
func (b *Backend) FreeMemory() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}
