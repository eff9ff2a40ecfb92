package ops

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pistil/graph"
)

// The worker pool runs every chunk and item once, with the caller's and the helpers'
// shares, whether callers take turns, nest a loop in a loop (the inner one takes the
// goroutine path) or call at once from several goroutines; and with the pool off.
func TestWorkerPoolRunsEveryChunk(t *testing.T) {
	defer SetWorkerPool(WorkerPool())
	for _, pool := range []bool{true, false} {
		SetWorkerPool(pool)
		for _, workers := range []int{2, 3, 5} {
			env := &Env{Workers: workers}
			for _, n := range []int{0, 1, 2, 7, 64, 1000} {
				seen := make([]atomic.Int32, n)
				parallelRange(env, n, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				})
				parallelItems(env, n, func(worker, i int) {
					if worker < 0 || worker >= workers {
						t.Errorf("worker %d of %d", worker, workers)
					}
					seen[i].Add(10)
				})
				parallelChunks(env, n, func(chunk, lo, hi int) {
					if want := chunk * n / min(workers, n); lo != want {
						t.Errorf("n=%d chunk %d starts at %d, want %d", n, chunk, lo, want)
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(100)
						// A nested loop: the pool is held, so it takes the goroutine path.
						var inner atomic.Int32
						parallelRange(env, 3, func(lo, hi int) { inner.Add(int32(hi - lo)) })
						if inner.Load() != 3 {
							t.Errorf("nested loop ran %d of 3", inner.Load())
						}
					}
				})
				for i := range seen {
					if got := seen[i].Load(); got != 111 {
						t.Fatalf("pool=%v workers=%d n=%d: index %d ran %d (want 111: once in each loop)", pool, workers, n, i, got)
					}
				}
			}
		}
		// Concurrent callers: one holds the pool, the others start goroutines.
		var wg sync.WaitGroup
		var total atomic.Int64
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 200; r++ {
					parallelRange(&Env{Workers: 2}, 100, func(lo, hi int) { total.Add(int64(hi - lo)) })
				}
			}()
		}
		wg.Wait()
		if total.Load() != 4*200*100 {
			t.Fatalf("pool=%v: concurrent callers covered %d of %d", pool, total.Load(), 4*200*100)
		}
	}
}

// With one OS thread for Go (a machine whose other core another process holds), the
// helpers cannot start while the caller runs, so the caller takes their chunks itself
// (poolJob.claimed): every chunk and item still runs exactly once, each chunk once, and
// loops after it keep finding the pool usable.
func TestWorkerPoolCallerTakesUnstartedChunks(t *testing.T) {
	defer SetWorkerPool(WorkerPool())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	SetWorkerPool(true)
	for r := 0; r < 50; r++ {
		for _, workers := range []int{2, 4} {
			n := 10 + r
			seen := make([]atomic.Int32, n)
			var chunks [4]atomic.Int32
			parallelChunks(&Env{Workers: workers}, n, func(chunk, lo, hi int) {
				chunks[chunk].Add(1)
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			parallelItems(&Env{Workers: workers}, n, func(_, i int) { seen[i].Add(10) })
			for c := 0; c < workers; c++ {
				if got := chunks[c].Load(); got != 1 {
					t.Fatalf("round %d, %d workers: chunk %d ran %d times", r, workers, c, got)
				}
			}
			for i := range seen {
				if got := seen[i].Load(); got != 11 {
					t.Fatalf("round %d, %d workers: index %d ran %d (want 11)", r, workers, i, got)
				}
			}
		}
	}
}

// A caller that sleeps waiting for its helper is always woken: a hundred thousand
// two-chunk loops with spins of a microsecond, so that callers and helpers go to sleep and
// wake each other in every order. Run as linux/arm64 under qemu-user (CI), callers slept
// forever within some tens of thousands of loops before sleepUntilFinished looked at the
// count again; natively and under qemu-x86_64 it passed either way.
func TestWorkerPoolWakesItsCaller(t *testing.T) {
	defer SetWorkerPool(WorkerPool())
	SetWorkerPool(true)
	spin, runSpin := poolSpin.Load(), poolRunSpin.Load()
	defer func() { poolSpin.Store(spin); poolRunSpin.Store(runSpin) }()
	poolSpin.Store(int64(time.Microsecond))
	poolRunSpin.Store(int64(time.Microsecond))
	const loops = 100000
	env := &Env{Workers: 2}
	var ran atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range loops {
			parallelChunks(env, 2, func(chunk, lo, hi int) {
				if chunk == 1 && i%5 == 0 {
					time.Sleep(time.Duration(i%3) * time.Microsecond) // the helper finishes last
				}
				ran.Add(int64(hi - lo))
			})
		}
	}()
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		t.Fatalf("a caller slept forever: %d of %d chunks ran", ran.Load(), 2*loops)
	}
	if ran.Load() != 2*loops {
		t.Fatalf("%d of %d chunks ran", ran.Load(), 2*loops)
	}
}

// parallelBalanced runs every item once, hands fn worker indexes below the worker count
// and never the same index to two calls at once (per-worker scratch), with the pool and
// without, nested in another loop or not; and a worker held up in its first grain has the
// rest of its share taken by the others from the back.
func TestParallelBalancedRunsEveryItemOnceAndSteals(t *testing.T) {
	defer SetWorkerPool(WorkerPool())
	defer SetBalancedRegions(true)
	SetBalancedRegions(true)
	for _, pool := range []bool{true, false} {
		SetWorkerPool(pool)
		for _, workers := range []int{2, 3, 5} {
			env := &Env{Workers: workers}
			for _, n := range []int{0, 1, 2, 7, 64, 1000} {
				seen := make([]atomic.Int32, n)
				busy := make([]atomic.Bool, workers)
				parallelBalanced(env, n, func(worker, lo, hi int) {
					if worker < 0 || worker >= workers {
						t.Errorf("worker %d of %d", worker, workers)
						return
					}
					if !busy[worker].CompareAndSwap(false, true) {
						t.Errorf("two calls with worker %d at once", worker)
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
					busy[worker].Store(false)
				})
				for i := range seen {
					if got := seen[i].Load(); got != 1 {
						t.Fatalf("pool=%v workers=%d n=%d: index %d ran %d times", pool, workers, n, i, got)
					}
				}
			}
			// Worker 1 sleeps in its first grain: the others finish its share.
			const n = 800
			var slept atomic.Bool
			ran := make([]atomic.Int32, workers)
			stolen := make([]atomic.Int32, workers)
			parallelBalanced(env, n, func(worker, lo, hi int) {
				time.Sleep(100 * time.Microsecond) // every grain takes a while: all workers start
				if worker == 1 && slept.CompareAndSwap(false, true) {
					time.Sleep(20 * time.Millisecond)
				}
				ran[worker].Add(int32(hi - lo))
				if worker != 1 && lo >= n/workers && hi <= 2*n/workers {
					stolen[worker].Add(int32(hi - lo))
				}
			})
			var others int32
			for c := range stolen {
				others += stolen[c].Load()
			}
			if others == 0 || ran[1].Load() >= int32(n/workers) {
				t.Errorf("pool=%v workers=%d: the slow worker ran %d items, the others took %d of its share", pool, workers, ran[1].Load(), others)
			}
		}
	}
	// Switched off, it is parallelChunks: one call per worker, its whole share.
	SetBalancedRegions(false)
	calls := make([]atomic.Int32, 3)
	parallelBalanced(&Env{Workers: 3}, 300, func(worker, lo, hi int) {
		calls[worker].Add(1)
		if lo != worker*100 || hi != (worker+1)*100 {
			t.Errorf("off: worker %d ran [%d, %d)", worker, lo, hi)
		}
	})
	for c := range calls {
		if calls[c].Load() != 1 {
			t.Errorf("off: worker %d called %d times", c, calls[c].Load())
		}
	}
}

// A decode step's MoE, fused projections and one-row qmatmul give the same bits with the
// worker pool, the longer decode regions and their work stealing on and off, float32 and
// int8 activations.
func TestDecodeRegionsAndPoolSameBits(t *testing.T) {
	defer SetWorkerPool(WorkerPool())
	defer SetDecodeRegions(DecodeRegions())
	defer SetBalancedRegions(true)
	rng := rand.New(rand.NewSource(5))
	const E, M, K, k = 16, 192, 512, 4
	wg, wu := randQuantized(rng, 4, 64, E, M, K), randQuantized(rng, 4, 64, E, M, K)
	wd := randQuantized(rng, 4, 64, E, K, M)
	sg, su, sd := randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, M, K), randQuantized(rng, 4, 64, K, M)
	p1, p2, p3 := randQuantized(rng, 4, 64, 640, K), randQuantized(rng, 4, 64, 32, K), randQuantized(rng, 8, 64, 96, K)
	x := randTensor(rng, 1, 1, K)
	ids := NewTensor(graph.I32, 1, k)
	for j, e := range rng.Perm(E)[:k] {
		ids.I32()[j] = int32(e)
	}
	weights := randTensor(rng, 0.3, 1, k)
	gate := randTensor(rng, 1, 1, 1)
	run := func(act string, workers int) []float32 {
		env := &Env{Workers: workers, Kernels: KernelsFast, Activations: act}
		routed, shared := NewTensor(graph.F32, 1, k, M), NewTensor(graph.F32, 1, M)
		y := NewTensor(graph.F32, 1, K)
		outs := []*Tensor{NewTensor(graph.F32, 1, 640), NewTensor(graph.F32, 1, 32), NewTensor(graph.F32, 1, 96)}
		q := NewTensor(graph.F32, 1, 640)
		for _, c := range []struct {
			op   string
			in   []*Tensor
			outs []*Tensor
		}{
			{"expert_matmul_swiglu_shared", []*Tensor{x, wg, wu, ids, sg, su}, []*Tensor{routed, shared}},
			{"expert_matmul_combine_shared", []*Tensor{routed, wd, ids, weights, shared, sd, gate}, []*Tensor{y}},
			{"matmuls", []*Tensor{y, p1, p2, p3}, outs},
			{"qmatmul", []*Tensor{y, p1}, []*Tensor{q}},
		} {
			g, err := opGraph(c.op, nil, c.in...)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := Default.Info(c.op)
			if err := info.Ref(env, g.Values[len(c.in)], c.in, c.outs); err != nil {
				t.Fatalf("%s: %v", c.op, err)
			}
		}
		var all []float32
		for _, o := range append([]*Tensor{routed, shared, y, q}, outs...) {
			all = append(all, o.F32()...)
		}
		return all
	}
	for _, act := range []string{ActivationsF32, ActivationsInt8All} {
		SetWorkerPool(false)
		SetDecodeRegions(false)
		want := run(act, 2)
		if one := run(act, 1); !slices.Equal(one, want) {
			t.Errorf("%s: one worker differs from two", act)
		}
		for _, pool := range []bool{false, true} {
			for _, regions := range []bool{false, true} {
				for _, balanced := range []bool{false, true} {
					SetWorkerPool(pool)
					SetDecodeRegions(regions)
					SetBalancedRegions(balanced)
					for _, workers := range []int{2, 3} {
						name := fmt.Sprintf("%s pool=%v regions=%v balanced=%v workers=%d", act, pool, regions, balanced, workers)
						if got := run(act, workers); !slices.Equal(got, want) {
							t.Errorf("%s: differs from the goroutine path's bits", name)
						}
					}
				}
			}
		}
	}
}
