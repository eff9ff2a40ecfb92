package cpu

import (
	"errors"

	"pistil/internal/meminfo"
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
func (b *Backend) FreeMemory() (int64, error) { return meminfo.Available() }

// memAvailable is FreeMemory, or 0 when unknown.
func memAvailable() int64 {
	n, err := meminfo.Available()
	if err != nil {
		return 0
	}
	return n
}
