package ops

import (
	"sync"
	"sync/atomic"
)

// workers is the goroutine count a reference may use.
func (e *Env) workers() int {
	if e == nil || e.Workers < 1 {
		return 1
	}
	return e.Workers
}

// serial is env's kernel choices on one worker: for work already split at a coarser level.
func (e *Env) serial() *Env {
	if e == nil {
		return nil
	}
	one := *e
	one.Workers = 1
	return &one
}

// parallelRange splits [0, n) into at most env.Workers contiguous chunks and runs fn on
// each concurrently. Chunks are contiguous so that a worker's writes stay together and a
// worker can allocate its scratch once per call.
func parallelRange(env *Env, n int, fn func(lo, hi int)) {
	w := env.workers()
	if w > n {
		w = n
	}
	if w <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < w; i++ {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// parallelItems runs fn(worker, item) for every item in [0, n), handing items out one at a
// time: for work whose items differ in size (experts with different token counts).
// worker indexes per-worker scratch.
func parallelItems(env *Env, n int, fn func(worker, item int)) {
	w := env.workers()
	if w > n {
		w = n
	}
	if w <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(k, i)
			}
		}()
	}
	wg.Wait()
}
