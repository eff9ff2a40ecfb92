//go:build darwin

package metal

import "errors"

var (
	errProgramClosed = errors.New("metal: the program is closed")
	errStateClosed   = errors.New("metal: the session state is closed")
)

// Close implements exec.Backend: it releases the weights' buffers (the no-copy views do
// not own the checkpoint's mapping; the model unmaps it).
func (b *Backend) Close() error {
	b.mu.Lock()
	resident := b.resident
	b.resident, b.weights = nil, map[string]Operand{}
	b.mu.Unlock()
	return b.dev.thread.do(func() error {
		for _, r := range resident {
			if mb, ok := r.(*buffer); ok {
				send(mb.id, selRelease)
			}
		}
		return nil
	})
}

// Close implements exec.Program.
func (p *program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.enc != nil {
		p.b.dev.thread.do(p.enc.Drain)
	}
	p.release()
	p.enc, p.bound = nil, nil
	return nil
}

// Close implements exec.State.
func (s *state) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.b.dev.thread.do(func() error {
		for name, b := range s.bufs {
			send(b.id, selRelease)
			delete(s.bufs, name)
		}
		return nil
	})
}
