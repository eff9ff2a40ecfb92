package serve

import (
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// metrics are the server's counters, served as Prometheus text on /metrics. Names follow
// llama.cpp's where they mean the same thing.
type metrics struct {
	requests        sync.Map // requestKey -> *atomic.Int64
	promptTokens    atomic.Int64
	cachedTokens    atomic.Int64
	prefillTokens   atomic.Int64 // prompt tokens the engine actually ran
	generatedTokens atomic.Int64
	decodeSteps     atomic.Int64 // engine decode steps
	cancelled       atomic.Int64 // requests ended by their client going away
	// stepsAfterCancelMax is the most decode steps any request ran after its context was
	// cancelled: the load test asserts it never exceeds one.
	stepsAfterCancelMax atomic.Int64

	mu                          sync.Mutex
	lastPrefillTPS, lastDecTPS  float64
	prefillSeconds, decodeSecs  float64
	prefillCounted, decodeCount int64
}

type requestKey struct {
	endpoint string
	status   int
}

func (m *metrics) countRequest(endpoint string, status int) {
	v, _ := m.requests.LoadOrStore(requestKey{endpoint, status}, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (m *metrics) noteStepsAfterCancel(n int64) {
	for {
		cur := m.stepsAfterCancelMax.Load()
		if n <= cur || m.stepsAfterCancelMax.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (m *metrics) noteSpeeds(prefillTokens int, prefillSec float64, decodeTokens int, decodeSec float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prefillTokens > 0 && prefillSec > 0 {
		m.lastPrefillTPS = float64(prefillTokens) / prefillSec
		m.prefillSeconds += prefillSec
		m.prefillCounted += int64(prefillTokens)
	}
	if decodeTokens > 0 && decodeSec > 0 {
		m.lastDecTPS = float64(decodeTokens) / decodeSec
		m.decodeSecs += decodeSec
		m.decodeCount += int64(decodeTokens)
	}
}

// write renders every metric in the Prometheus text exposition format.
func (m *metrics) write(w io.Writer, queueDepth int, running bool, cache cacheStats, ready bool) {
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, formatFloat(v))
	}
	counter := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	fmt.Fprintf(w, "# HELP pistil_requests_total HTTP requests by endpoint and status.\n# TYPE pistil_requests_total counter\n")
	m.requests.Range(func(k, v any) bool {
		key := k.(requestKey)
		fmt.Fprintf(w, "pistil_requests_total{endpoint=%q,status=\"%d\"} %d\n", key.endpoint, key.status, v.(*atomic.Int64).Load())
		return true
	})
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge("pistil_ready", "1 once the model is loaded.", b2f(ready))
	gauge("pistil_requests_deferred", "Requests waiting in the queue.", float64(queueDepth))
	gauge("pistil_requests_processing", "Requests running on the engine.", b2f(running))
	counter("pistil_prompt_tokens_total", "Prompt tokens of finished and running requests.", m.promptTokens.Load())
	counter("pistil_prompt_cached_tokens_total", "Prompt tokens served from the prefix cache.", m.cachedTokens.Load())
	counter("pistil_prefill_tokens_total", "Prompt tokens the engine prefilled.", m.prefillTokens.Load())
	counter("pistil_tokens_predicted_total", "Generated tokens.", m.generatedTokens.Load())
	counter("pistil_decode_steps_total", "Engine decode steps.", m.decodeSteps.Load())
	counter("pistil_requests_cancelled_total", "Requests whose client went away.", m.cancelled.Load())
	gauge("pistil_decode_steps_after_cancel_max", "Most decode steps a request ran after its client went away.", float64(m.stepsAfterCancelMax.Load()))
	m.mu.Lock()
	gauge("pistil_prompt_tokens_seconds", "Prefill speed of the last request (tokens/s).", m.lastPrefillTPS)
	gauge("pistil_predicted_tokens_seconds", "Decode speed of the last request (tokens/s).", m.lastDecTPS)
	avg := func(n int64, s float64) float64 {
		if s == 0 {
			return 0
		}
		return float64(n) / s
	}
	gauge("pistil_prompt_tokens_seconds_avg", "Prefill speed over all requests (tokens/s).", avg(m.prefillCounted, m.prefillSeconds))
	gauge("pistil_predicted_tokens_seconds_avg", "Decode speed over all requests (tokens/s).", avg(m.decodeCount, m.decodeSecs))
	m.mu.Unlock()
	counter("pistil_prefix_cache_hits_total", "Requests that restored a cached prefix.", cache.Hits)
	counter("pistil_prefix_cache_misses_total", "Requests that found no cached prefix.", cache.Misses)
	gauge("pistil_prefix_cache_entries", "Snapshots held by the prefix cache.", float64(cache.Entries))
	gauge("pistil_prefix_cache_bytes", "Bytes held by the prefix cache.", float64(cache.Bytes))
	gauge("pistil_prefix_cache_budget_bytes", "The prefix cache's byte budget.", float64(cache.Budget))
	counter("pistil_prefix_cache_evictions_total", "Snapshots evicted to stay within the budget.", cache.Evictions)
	counter("pistil_prefix_cache_restored_tokens_total", "Prompt tokens restored from cached snapshots.", cache.RestoredTokens)
	gauge("pistil_prefix_cache_kv_blocks", "Shared KV blocks held by the prefix cache.", float64(cache.Blocks))
	gauge("pistil_prefix_cache_kv_bytes", "Bytes of the shared KV blocks (part of pistil_prefix_cache_bytes).", float64(cache.KVBytes))
	gauge("pistil_prefix_cache_device_bytes", "Bytes of the prefix cache in device memory, apart from the host's (a GPU backend's; part of pistil_prefix_cache_bytes).", float64(cache.DeviceBytes))
	gauge("pistil_prefix_cache_device_budget_bytes", "The most of the prefix cache's budget kept in device memory; past it entries spill to host memory.", float64(cache.DeviceBudget))
	counter("pistil_prefix_cache_spills_total", "Cache entries moved from device to host memory.", cache.Spills)
}

func formatFloat(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return fmt.Sprintf("%g", v)
}

// processMetrics are the standard process_* and go_* metrics (resident and virtual
// memory, open and maximum file descriptors, CPU seconds, start time, goroutines,
// threads, heap and GC), collected by the Prometheus client library so that their names
// and meaning are the ones every dashboard expects, on Linux and macOS alike.
var processMetrics = func() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return r
}()

// writeProcessMetrics appends the process metrics to a /metrics response.
func writeProcessMetrics(w io.Writer) error {
	families, err := processMetrics.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}
