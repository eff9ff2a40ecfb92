package bench

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"time"

	"pistil/plan"
)

// Bandwidth is the machine's measured streaming read bandwidth: the yardstick a decode
// speed is judged by (a decode step reads every active weight once, so bytes per token
// times tokens per second cannot exceed it).
type Bandwidth struct {
	// BytesPerSec is the best of the timed passes with Threads goroutines reading
	// disjoint parts of one buffer.
	BytesPerSec float64 `json:"bytes_per_sec"`
	// SingleThread is the same with one goroutine (how far one core gets alone).
	SingleThread float64 `json:"single_thread_bytes_per_sec"`
	Threads      int     `json:"threads"`
	BufferBytes  int64   `json:"buffer_bytes"`
	Passes       int     `json:"passes"`
	// Kernel names the read loop: "avx2" (32-byte loads) or "go" (8-byte loads, where
	// no vector kernel exists; it may understate the machine).
	Kernel string `json:"kernel"`
}

// DefaultBandwidthBytes is the buffer MeasureBandwidth reads: eight times a large L3
// cache, so that what is timed is memory, not a cache.
const DefaultBandwidthBytes = 256 << 20

// MeasureBandwidth times reading a buffer of size bytes (rounded down to 4 KiB) with
// threads goroutines (0: GOMAXPROCS) and with one, passes times each after a warm-up
// pass that also faults the pages in, and keeps the fastest pass of each: the question
// is what the memory can deliver, and slower passes are other load on the machine.
func MeasureBandwidth(size int64, threads, passes int) (Bandwidth, error) {
	m, err := newBandwidthMeter(size, threads, passes)
	if err != nil {
		return Bandwidth{}, err
	}
	return m.measure(), nil
}

// bandwidthMeter keeps MeasureBandwidth's buffer, so that the line can be measured again
// beside each decode measurement: on a shared machine it moves by a third from one minute
// to the next, and a share of a line measured long before the runs would say as much
// about the neighbours as about the engine.
type bandwidthMeter struct {
	buf             []uint64
	threads, passes int
}

func newBandwidthMeter(size int64, threads, passes int) (*bandwidthMeter, error) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	size &^= 4095
	if size < 1<<20 {
		return nil, fmt.Errorf("bandwidth buffer of %d bytes is too small to measure memory (want at least 1 MiB)", size)
	}
	if passes < 1 {
		return nil, fmt.Errorf("bandwidth passes %d must be positive", passes)
	}
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i) // written, so the pages are real memory, not the shared zero page
	}
	return &bandwidthMeter{buf: buf, threads: threads, passes: passes}, nil
}

// measure is the line with every thread and with one.
func (m *bandwidthMeter) measure() Bandwidth {
	bw := Bandwidth{Threads: m.threads, BufferBytes: int64(len(m.buf)) * 8, Passes: m.passes, Kernel: readKernel}
	bw.BytesPerSec = m.line()
	bw.SingleThread = bestPass(m.buf, 1, m.passes)
	return bw
}

// line is the line with every thread, without measure's one-thread passes.
func (m *bandwidthMeter) line() float64 { return bestPass(m.buf, m.threads, m.passes) }

// sink keeps the sums of the read loops alive, so that no read is optimised away.
var sink uint64

// bestPass is the highest bytes per second of passes timed reads of buf split into
// threads contiguous parts, after one untimed pass.
func bestPass(buf []uint64, threads, passes int) float64 {
	best := 0.0
	for p := -1; p < passes; p++ {
		var wg sync.WaitGroup
		sums := make([]uint64, threads)
		start := time.Now()
		for t := range threads {
			lo, hi := len(buf)*t/threads, len(buf)*(t+1)/threads
			lo, hi = lo&^63, hi&^63 // whole 512-byte lines of the kernel
			wg.Add(1)
			go func() {
				defer wg.Done()
				sums[t] = readSum(buf[lo:hi])
			}()
		}
		wg.Wait()
		secs := time.Since(start).Seconds()
		for _, s := range sums {
			sink += s
		}
		if p >= 0 && secs > 0 {
			best = max(best, float64(len(buf)*8)/secs)
		}
	}
	return best
}

// readSumGo is the portable read loop: eight independent 8-byte loads per step, folded
// by OR like the vector loop.
func readSumGo(b []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(b); i += 8 {
		c := b[i : i+8 : i+8]
		s0 |= c[0]
		s1 |= c[1]
		s2 |= c[2]
		s3 |= c[3]
		s4 |= c[4]
		s5 |= c[5]
		s6 |= c[6]
		s7 |= c[7]
	}
	return s0 | s1 | s2 | s3 | s4 | s5 | s6 | s7
}

// costs are what one run of the plan for some token count reads and computes as a
// function of the context c it starts at: every cost in the op table is linear in c
// (attention reads c+t cache rows), so plans compiled at two contexts give it exactly.
type costs struct {
	at1, slope plan.Totals
}

func (k costs) at(c int) (bytes, weightBytes, flops int64) {
	d := int64(c - 1)
	return k.at1.BytesRead + d*k.slope.BytesRead,
		k.at1.WeightBytesRead + d*k.slope.WeightBytesRead,
		k.at1.Flops + d*k.slope.Flops
}

// planCosts compiles the plan for tokens at contexts 1 and 2 (a cost context of 0
// means the compiler's default, not an empty context).
func planCosts(plans func(tokens, context int) (*plan.Plan, error), tokens int) (costs, error) {
	p1, err := plans(tokens, 1)
	if err != nil {
		return costs{}, err
	}
	p2, err := plans(tokens, 2)
	if err != nil {
		return costs{}, err
	}
	a, b := p1.Totals, p2.Totals
	return costs{at1: a, slope: plan.Totals{
		BytesRead: b.BytesRead - a.BytesRead, WeightBytesRead: b.WeightBytesRead - a.WeightBytesRead, Flops: b.Flops - a.Flops,
	}}, nil
}

// prefillPieces are the token counts, in order, a prompt of n tokens is prefilled in
// with prefill chunk chunk: full chunks, then the largest power of two that fits, as
// exec's Session splits it.
func prefillPieces(n, chunk int) []int {
	var out []int
	for n > 0 {
		p := chunk
		if n < chunk {
			p = 1 << (bits.Len(uint(n)) - 1)
		}
		out = append(out, p)
		n -= p
	}
	return out
}

// addRoofline fills in each measurement's bytes per token and flops from the plans, and
// the share of the measured bandwidth a decode reached (of BandwidthLine).
func addRoofline(plans func(tokens, context int) (*plan.Plan, error), chunk int, res *Result, decodeTokens int) error {
	byTokens := map[int]costs{}
	costsFor := func(t int) (costs, error) {
		if k, ok := byTokens[t]; ok {
			return k, nil
		}
		k, err := planCosts(plans, t)
		byTokens[t] = k
		return k, err
	}
	for i := range res.Prefill {
		meas := &res.Prefill[i]
		var flops int64
		pos := meas.Context
		for _, piece := range prefillPieces(meas.Tokens, chunk) {
			k, err := costsFor(piece)
			if err != nil {
				return err
			}
			_, _, f := k.at(pos)
			flops += f
			pos += piece
		}
		meas.FlopsPerRun = flops
		meas.MedianGFLOPS = float64(flops) / (float64(meas.Tokens) / meas.MedianTPS) / 1e9
	}
	if len(res.Decode) == 0 {
		return nil
	}
	decode, err := costsFor(1)
	if err != nil {
		return err
	}
	for i := range res.Decode {
		meas := &res.Decode[i]
		// The mean cost over the timed steps is the mean of the first and the last (it is
		// linear in the context).
		b0, w0, _ := decode.at(meas.Context)
		b1, w1, _ := decode.at(meas.Context + decodeTokens - 1)
		meas.BytesPerToken, meas.WeightBytesPerToken = (b0+b1)/2, (w0+w1)/2
		if line := meas.BandwidthLine(res.Bandwidth); line > 0 {
			meas.BandwidthShare = float64(meas.BytesPerToken) * meas.MedianTPS / line
		}
	}
	return nil
}

// BandwidthLine is the line a decode measurement's share is taken of: the higher of the
// line measured at the start (start) and the one right after the measurement's timed
// runs, so that a line the neighbours depressed for a moment never inflates the share
// (0 when neither was measured).
func (meas *Measurement) BandwidthLine(start *Bandwidth) float64 {
	line := meas.BandwidthAfter
	if start != nil {
		line = max(line, start.BytesPerSec)
	}
	return line
}
