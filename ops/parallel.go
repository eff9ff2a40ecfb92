package ops

import (
	"context"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
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
	parallelChunks(env, n, func(_, lo, hi int) { fn(lo, hi) })
}

// parallelChunks is parallelRange with the chunk's index (its worker) passed to fn.
func parallelChunks(env *Env, n int, fn func(chunk, lo, hi int)) {
	w := env.workers()
	if w > n {
		w = n
	}
	if w <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	runOnWorkers(env, w, func(i int) { fn(i, i*n/w, (i+1)*n/w) })
}

// runOnWorkers runs body(0) .. body(w-1) concurrently: on the worker pool where it is on
// and free, else on a goroutine each.
func runOnWorkers(env *Env, w int, body func(c int)) {
	if runPooled(env, w, body) {
		return
	}
	var wg sync.WaitGroup
	for c := 0; c < w; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(c)
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
	take := func(k int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			fn(k, i)
		}
	}
	runOnWorkers(env, w, take)
}

// The worker pool ([cpu] worker_pool, SetWorkerPool): instead of starting a goroutine per
// chunk of every parallel loop and waiting for it (a decode step of the 35B-A3B has about
// 400 dispatches, most with one or two parallel loops, and each start wakes a parked
// thread, tens of microseconds on a VM whose idle vCPU halted), the caller runs chunk 0
// itself and persistent helper goroutines run the others. A helper that finishes a chunk
// spins on the pool's sequence number for up to poolSpin before it parks, so the loops of
// one decode step (back to back, a few microseconds apart) find it awake. The chunks and
// the items are those of the goroutine path (parallelRange's boundaries, parallelItems'
// counter), so every result is the same to the bit. One caller at a time: a loop started
// while another holds the pool (nested loops, concurrent sessions) takes the goroutine path.

// decodeRegions switches on the decode step's longer parallel regions
// (SetDecodeRegions): the routed experts' blocks in one contiguous run per worker
// (parallelExpertRuns) and the weights of a fused projection in one region
// (mulRowsOneRegion).
var decodeRegions atomic.Bool

// multiRowKernels has the float32-activation q4 products take several weight rows per
// kernel call where the kernel set has such kernels (SetMultiRowKernels): decode's
// mulQuantRow four rows, mulQuantBlock's eight activation rows two weight rows.
var multiRowKernels atomic.Bool

func init() {
	decodeRegions.Store(true)
	multiRowKernels.Store(true)
	if v, err := time.ParseDuration(os.Getenv("PISTIL_POOL_SPIN")); err == nil {
		poolSpin.Store(int64(v))
	}
	if v, err := time.ParseDuration(os.Getenv("PISTIL_POOL_RUN_SPIN")); err == nil {
		poolRunSpin.Store(int64(v))
	}
}

// SetDecodeRegions switches the decode step's longer parallel regions on or off,
// process-wide ([cpu] decode_regions). Either way every sum is the same to the bit.
func SetDecodeRegions(on bool) { decodeRegions.Store(on) }

// DecodeRegions reports whether the decode step's longer parallel regions are on.
func DecodeRegions() bool { return decodeRegions.Load() }

// SetMultiRowKernels switches the q4 kernels that take several weight rows per call on or
// off, process-wide ([cpu] multi_row_kernels). Either way every dot is the same to the bit.
func SetMultiRowKernels(on bool) { multiRowKernels.Store(on) }

// poolSpin is how long an idle helper spins before it parks: longer than the gap between
// two loops of a decode step, short enough that a helper does not hold a core another
// process on a shared machine could use for long. The caller, its chunk done, spins while
// the helpers run theirs (up to poolRunSpin: a chunk of a decode step's matmul streams for
// tens to hundreds of microseconds, and a parked caller costs a thread wake-up to resume);
// a chunk whose helper has not started by the time the caller's own is done the caller
// runs itself (poolJob.claimed), so a helper the OS has taken off its core (another
// process's turn) costs the loop its parallelism, not a wait for the OS to bring it back.
// Measured on the full model (cpu/README.md, session 10): spins of 20-50 us were slower
// than no pool, 1 ms collapsed under another process's load.
var (
	poolSpin    = durationOf(200 * time.Microsecond) // (atomic: a test shortens them while helpers run)
	poolRunSpin = durationOf(200 * time.Microsecond)
	poolYield   = os.Getenv("PISTIL_POOL_YIELD") != "0"
)

// workerPoolState is the pool's shared state (one, workerPool).
type workerPoolState struct {
	enabled atomic.Bool
	mu      sync.Mutex // held by the caller whose loop the helpers run
	seq     atomic.Uint64
	job     atomic.Pointer[poolJob]
	helpers []*poolHelper // guarded by mu
	finish  chan struct{} // the last helper's word to a caller that blocked
}

var workerPool = workerPoolState{finish: make(chan struct{}, 1)}

// SetWorkerPool switches the worker pool on or off, process-wide ([cpu] worker_pool; off
// unless set).
func SetWorkerPool(on bool) { workerPool.enabled.Store(on) }

// WorkerPool reports whether the worker pool is on.
func WorkerPool() bool { return workerPool.enabled.Load() }

type poolJob struct {
	fn     func(chunk int)
	chunks int // fn(1..chunks-1) run on helpers 0..chunks-2, or on the caller
	labels context.Context
	// claimed[c] is taken by whoever runs chunk c: its helper, or the caller, which runs
	// every chunk whose helper has not started by the time its own chunk is done (a
	// helper the OS has taken off its core, or one still waking up), so a loop never
	// waits on a helper that has not begun.
	claimed []atomic.Bool
	done    atomic.Int32 // chunks 1.. finished
	// callerAsleep is set by a caller that stopped spinning and waits on finish.
	callerAsleep atomic.Bool
}

// claim reports whether the caller takes chunk c (nobody has started it).
func (j *poolJob) claim(c int) bool { return j.claimed[c].CompareAndSwap(false, true) }

// finished counts chunk c as done and wakes the caller if it is the last one and the
// caller sleeps.
func (j *poolJob) finished() {
	if j.done.Add(1) == int32(j.chunks-1) && j.callerAsleep.CompareAndSwap(true, false) {
		workerPool.finish <- struct{}{}
	}
}

type poolHelper struct {
	index  int // runs chunk index+1
	asleep atomic.Bool
	wake   chan struct{}
}

// runPooled runs fn(0) .. fn(w-1) concurrently on the caller and w-1 helpers and reports
// true, or reports false (having run nothing) when the pool is off or busy.
func runPooled(env *Env, w int, fn func(chunk int)) bool {
	p := &workerPool
	if !p.enabled.Load() || !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	for len(p.helpers) < w-1 {
		h := &poolHelper{index: len(p.helpers), wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go h.run(p.seq.Load())
	}
	job := &poolJob{fn: fn, chunks: w, labels: env.labels(), claimed: make([]atomic.Bool, w)}
	p.job.Store(job)
	p.seq.Add(1)
	for _, h := range p.helpers[:w-1] {
		if h.asleep.CompareAndSwap(true, false) {
			h.wake <- struct{}{}
		}
	}
	fn(0)
	for c := 1; c < w; c++ {
		if job.claim(c) {
			fn(c)
			job.finished()
		}
	}
	if job.done.Load() == int32(w-1) {
		return true
	}
	// The rest are running on helpers: spin, then sleep until the last one says so.
	start := time.Now()
	for spins := 1; job.done.Load() != int32(w-1); spins++ {
		if spins&63 != 0 {
			continue
		}
		if poolYield {
			osYield()
		}
		if time.Since(start) > time.Duration(poolRunSpin.Load()) {
			job.callerAsleep.Store(true)
			if job.done.Load() == int32(w-1) && job.callerAsleep.CompareAndSwap(true, false) {
				break
			}
			p.sleepUntilFinished(job, w)
			break
		}
	}
	return true
}

// durationOf is an atomic duration holding d.
func durationOf(d time.Duration) *atomic.Int64 {
	var a atomic.Int64
	a.Store(int64(d))
	return &a
}

// poolRecheck is how often a sleeping caller looks at its job's count again.
const poolRecheck = time.Millisecond

// sleepUntilFinished waits for the last helper's word on finish, looking at the job's
// count again every poolRecheck. The flag and the count make a store-then-load handshake
// on each side (callerAsleep then done here, done then callerAsleep in finished), which
// holds only if each side's store is seen before its load. Run as linux/arm64 under
// qemu-user (CI) callers slept forever (TestWorkerPoolWakesItsCaller; not natively, not
// under qemu-x86_64: apparently the emulator does not keep arm64's store-release before
// a later load-acquire). With the recheck a lost word costs a millisecond. The count at
// its end with our flag still set means no word will come (the helper saw us awake); the
// flag already cleared means the helper took it and its word is on the way.
func (p *workerPoolState) sleepUntilFinished(job *poolJob, w int) {
	recheck := time.NewTimer(poolRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-p.finish:
			return
		case <-recheck.C:
		}
		if job.done.Load() == int32(w-1) && job.callerAsleep.CompareAndSwap(true, false) {
			return
		}
		recheck.Reset(poolRecheck)
	}
}

// labels is the pprof labels the helpers run a loop of env's caller under.
func (e *Env) labels() context.Context {
	if e == nil || e.Labels == nil {
		return context.Background()
	}
	return e.Labels
}

// poolIdleLabels are a helper's pprof labels while it waits for a loop, so that a
// profile does not count its spinning as the last op's work.
var poolIdleLabels = pprof.WithLabels(context.Background(), pprof.Labels("op", "(worker pool spin)"))

func (h *poolHelper) run(seen uint64) {
	p := &workerPool
	labels := poolIdleLabels
	pprof.SetGoroutineLabels(labels)
	for {
		// Wait for a job newer than seen: spin, then park.
		start := time.Now()
		for spins := 0; p.seq.Load() == seen; spins++ {
			if spins&63 == 63 {
				if poolYield {
					osYield()
				}
				if time.Since(start) > time.Duration(poolSpin.Load()) {
					h.asleep.Store(true)
					if p.seq.Load() != seen && h.asleep.CompareAndSwap(true, false) {
						break // a job came before anyone saw us asleep
					}
					<-h.wake // asleep.CompareAndSwap(true, false) by the caller, or already woken
					break
				}
			}
		}
		seen = p.seq.Load()
		job := p.job.Load()
		if c := h.index + 1; c < job.chunks && job.claim(c) {
			if job.labels != labels {
				labels = job.labels
				pprof.SetGoroutineLabels(labels)
			}
			job.fn(c)
			job.finished()
		}
		if labels != poolIdleLabels {
			labels = poolIdleLabels
			pprof.SetGoroutineLabels(labels)
		}
	}
}

// balancedRegions has decode's longer regions (parallelBalanced's callers) hand their
// work out in grains, each worker taking its own share from the front and, once that is
// done, the other shares from their backs (SetBalancedRegions; [cpu] balanced_regions).
var balancedRegions atomic.Bool

func init() { balancedRegions.Store(true) }

// SetBalancedRegions switches the decode regions' work stealing on or off, process-wide
// ([cpu] balanced_regions). Either way every output is the same kernel on the same bytes,
// so the same to the bit.
func SetBalancedRegions(on bool) { balancedRegions.Store(on) }

// share is one worker's part [front, back) of a balanced loop, both ends in one word so
// that its owner (from the front) and a thief (from the back) claim grains with one CAS.
type share struct{ ends atomic.Uint64 }

func (s *share) set(lo, hi int) { s.ends.Store(uint64(lo)<<32 | uint64(hi)) }

// take claims up to grain items from the front (the owner) or the back (a thief) and
// reports false once the share is empty.
func (s *share) take(grain int, fromBack bool) (lo, hi int, ok bool) {
	for {
		old := s.ends.Load()
		f, b := int(old>>32), int(old&0xffffffff)
		if f >= b {
			return 0, 0, false
		}
		if fromBack {
			lo, hi = max(f, b-grain), b
			if s.ends.CompareAndSwap(old, uint64(f)<<32|uint64(lo)) {
				return lo, hi, true
			}
			continue
		}
		lo, hi = f, min(b, f+grain)
		if s.ends.CompareAndSwap(old, uint64(hi)<<32|uint64(b)) {
			return lo, hi, true
		}
	}
}

// parallelBalanced runs fn over [0, n) as parallelChunks does, every item once, but in
// grains (an eighth of a share): worker c walks its share (parallelChunks' chunk c) from
// the front, then takes grains from the backs of the others' shares until all are empty.
// Each worker's work stays a few contiguous runs (its share ascending, a stolen one
// descending from its end), and a worker the OS took off its core, or one whose memory was
// slower, no longer holds the loop up: the other finishes its grains. (Decode's caller
// waited about 7 ms a token of the full model for its helper with fixed halves; with the
// grains decode ran as fast on a quiet machine and 3-5% faster beside a CPU hog: session
// 21, cpu/README.md.) fn may be called several times per worker, with worker indexing
// per-worker scratch as in parallelChunks.
func parallelBalanced(env *Env, n int, fn func(worker, lo, hi int)) {
	w := env.workers()
	if w > n {
		w = n
	}
	if w <= 1 || n >= 1<<32 || !balancedRegions.Load() {
		parallelChunks(env, n, fn)
		return
	}
	// Eight grains a share: long enough runs for the prefetchers, and at most an eighth of
	// a share left to the slower worker.
	grain := max(1, (n+8*w-1)/(8*w))
	shares := make([]share, w)
	for i := range shares {
		shares[i].set(i*n/w, (i+1)*n/w)
	}
	body := func(c int) {
		for {
			lo, hi, ok := shares[c].take(grain, false)
			if !ok {
				break
			}
			fn(c, lo, hi)
		}
		for v := 1; v < w; v++ {
			s := &shares[(c+v)%w]
			for {
				lo, hi, ok := s.take(grain, true)
				if !ok {
					break
				}
				fn(c, lo, hi)
			}
		}
	}
	runOnWorkers(env, w, body)
}
