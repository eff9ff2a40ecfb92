package serve

import (
	"container/list"
	"context"
	"sync"
)

// scheduler runs jobs one at a time on the single engine lane, in arrival order, with a
// bounded number waiting. A job whose context ends while it waits is dropped without
// running, so a client that gives up in the queue costs the engine nothing.
type scheduler struct {
	mu       sync.Mutex
	waiting  *list.List // of *job
	capacity int        // most jobs waiting (not counting the running one)
	running  *job
	closed   bool
	wake     chan struct{}
	stopped  chan struct{}
}

// job is one unit of engine work. run is called on the scheduler's goroutine.
type job struct {
	ctx      context.Context
	run      func()
	started  chan struct{} // closed when run begins
	finished chan struct{} // closed when run returns or the job is dropped
	elem     *list.Element
	// rejected is set (before finished closes) when the job was dropped unrun: its
	// context ended in the queue or the server shut down.
	rejected *apiError
}

func newJob(ctx context.Context, run func()) *job {
	return &job{ctx: ctx, run: run, started: make(chan struct{}), finished: make(chan struct{})}
}

func newScheduler(capacity int) *scheduler {
	s := &scheduler{waiting: list.New(), capacity: capacity, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go s.loop()
	return s
}

var (
	errBusy = func() *apiError {
		return unavailable("server_busy", 1, "server busy: the request queue is full, please try again")
	}
	errShuttingDown = func() *apiError {
		return unavailable("shutting_down", 5, "server is shutting down")
	}
)

// submit queues j, or returns a 503 when the queue is full or the server is closing.
func (s *scheduler) submit(j *job) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errShuttingDown()
	}
	if s.waiting.Len() >= s.capacity {
		return errBusy()
	}
	j.elem = s.waiting.PushBack(j)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// withdraw removes j from the queue if it has not started. It reports whether it did.
func (s *scheduler) withdraw(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.elem == nil {
		return false
	}
	s.waiting.Remove(j.elem)
	j.elem = nil
	j.rejected = &apiError{Status: 499, Message: "client closed the request"}
	close(j.finished)
	return true
}

// depth is the number of waiting jobs and whether one is running.
func (s *scheduler) depth() (waiting int, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting.Len(), s.running != nil
}

// close stops accepting jobs and drops every waiting one with a 503. The running job
// continues; close returns at once. loop exits when the running job is done.
func (s *scheduler) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for e := s.waiting.Front(); e != nil; e = s.waiting.Front() {
		j := s.waiting.Remove(e).(*job)
		j.elem = nil
		j.rejected = errShuttingDown()
		close(j.finished)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// idle is closed when the scheduler has closed and nothing runs any more.
func (s *scheduler) idle() <-chan struct{} { return s.stopped }

func (s *scheduler) next() (*job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = nil
	for {
		front := s.waiting.Front()
		if front == nil {
			return nil, !s.closed
		}
		j := s.waiting.Remove(front).(*job)
		j.elem = nil
		if j.ctx.Err() != nil {
			j.rejected = &apiError{Status: 499, Message: "client closed the request"}
			close(j.finished)
			continue
		}
		s.running = j
		return j, true
	}
}

func (s *scheduler) loop() {
	defer close(s.stopped)
	for {
		j, open := s.next()
		if j == nil {
			if !open {
				return
			}
			<-s.wake
			continue
		}
		close(j.started)
		j.run()
		close(j.finished)
	}
}
