//go:build linux

package cuda

import "errors"

// Close implements exec.Backend: it frees the weights uploaded for the model. The
// model closes its programs and states first. The device's context, stream and kernel
// module are the process's (compiled once, shared by every model), so they stay.
func (b *Backend) Close() error {
	b.mu.Lock()
	weights := b.weights
	b.weights = map[string]*deviceWeight{}
	b.mu.Unlock()
	return b.dev.do(func() error {
		for _, w := range weights {
			for _, a := range []uint64{w.w.Data, w.w.Scales, w.w.Biases} {
				b.dev.free(a)
			}
		}
		return nil
	})
}

// Close frees the program's device memory (scratch, outputs, step buffer) and destroys
// its CUDA graph; Run fails afterwards.
func (p *program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.release()
	p.launches, p.bound = nil, nil
	return nil
}

var errProgramClosed = errors.New("cuda: the program is closed")

// FreeMemory implements exec.MemoryReporter: the device's free memory (cuMemGetInfo).
func (b *Backend) FreeMemory() (int64, error) {
	var free, total uint64
	err := b.dev.do(func() error { return b.dev.d.check("cuMemGetInfo", b.dev.d.cuMemGetInfo(&free, &total)) })
	return int64(free), err
}
