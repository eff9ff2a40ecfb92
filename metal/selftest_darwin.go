//go:build darwin

package metal

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"strings"

	"pistil/metal/kernelcheck"
	"pistil/ops/kernels"
)

// SelfTest runs the device part of the Mac self-test and returns its report (Result not
// set yet; the caller adds the model checks and calls Finish): device and limits, the
// library's compilation and every pipeline, a broken source's compiler message, the args
// layout probe, the grid-ID test, and the barrier stress test through the real encoder.
func SelfTest() (*Report, error) {
	r := &Report{OS: runtime.GOOS + "/" + runtime.GOARCH}
	d, err := openDevice()
	if err != nil {
		r.Add("open the default Metal device", err, "")
		return r, nil
	}
	r.Device = &d.info
	err = d.thread.do(func() error {
		if !r.Add("compile every kernel (MSL 3.1, safe math) and build its pipeline", d.buildPipelines(), fmt.Sprintf("%d pipelines", len(d.pipelines))) {
			return nil
		}
		r.Pipelines = d.pipelines
		broken := kernels.MetalPrelude() + kernels.CDecls() + "KERNEL(broken, ArgmaxArgs) { pistil_undeclared_name = 1; }\n"
		_, cerr := d.compile(broken)
		switch {
		case cerr == nil:
			r.Add("a broken source is refused with the compiler's message", fmt.Errorf("the broken source compiled"), "")
		case !strings.Contains(cerr.Error(), "pistil_undeclared_name"):
			r.Add("a broken source is refused with the compiler's message", fmt.Errorf("the error does not name the culprit: %v", cerr), "")
		default:
			r.Add("a broken source is refused with the compiler's message", nil, firstLines(cerr.Error(), 3))
		}
		api := &metalAPI{d: d}
		r.Add("args layout probe: the compiler's offsetof/sizeof equal Go's", probeLayout(d, api), fmt.Sprintf("%d fields", len(kernels.Layouts())))
		r.Add("grid-ID test: every thread of a 12x4x2 grid sees its own position", gridTest(d, api), "")
		detail, err := barrierStress(d, api)
		r.Add("barrier stress: 64 dependent in-place adds, 3 steps, two command buffers in flight", err, detail)
		cases := kernelcheck.Cases()
		var failed []string
		for _, c := range cases {
			dev := &checkDevice{d: d, api: api}
			if err := c.Run(dev); err != nil {
				failed = append(failed, c.Name()+": "+err.Error())
			}
			dev.release()
		}
		var kerr error
		if len(failed) > 0 {
			kerr = fmt.Errorf("%d of %d cases fail: %s", len(failed), len(cases), strings.Join(failed, "; "))
		}
		r.Add("every kernel against the CPU reference (metal/kernelcheck: the tiny model's shapes, ties, bf16 stores)", kerr, fmt.Sprintf("%d cases", len(cases)))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// runLaunches encodes launches one after another (a barrier between each) in one
// command buffer and waits for it.
func runLaunches(api *metalAPI, pipes map[string]*computePipeline, launches []Launch) error {
	cb, err := api.NewCommandBuffer()
	if err != nil {
		return err
	}
	enc := cb.ComputeEncoder(true)
	for i, l := range launches {
		if i > 0 {
			enc.Barrier()
		}
		p, ok := pipes[l.Kernel]
		if !ok {
			return fmt.Errorf("no pipeline %s", l.Kernel)
		}
		enc.SetPipeline(p)
		enc.SetBytes(l.Args, 0)
		enc.Dispatch(l.Grid, l.Threads)
	}
	enc.End()
	cb.Commit()
	return cb.Wait()
}

func probeLayout(d *device, api *metalAPI) error {
	layouts := kernels.Layouts()
	out, err := d.newBuffer(int64(8 * len(layouts)))
	if err != nil {
		return err
	}
	defer send(out.id, selRelease)
	args := argBytes(struct{ Out uint64 }{out.addr})
	if err := runLaunches(api, d.pipelines, []Launch{{Kernel: kernels.KernelProbeLayout, Grid: [3]int{1, 1, 1}, Threads: 32, Args: args}}); err != nil {
		return err
	}
	var bad []string
	for i, l := range layouts {
		if v := binary.LittleEndian.Uint64(out.data[8*i:]); uintptr(v) != l.Offset {
			bad = append(bad, fmt.Sprintf("%s.%s: device %d, Go %d", l.Struct, l.Field, v, l.Offset))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d fields differ: %s", len(bad), strings.Join(bad, "; "))
	}
	return nil
}

func gridTest(d *device, api *metalAPI) error {
	lib, err := d.compile(kernels.MetalPrelude() + gridSource)
	if err != nil {
		return err
	}
	defer send(lib, selRelease)
	p, err := d.newPipeline(lib, "grid_ids")
	if err != nil {
		return err
	}
	n := testGrid[0] * testGrid[1] * testGrid[2] * testThreads
	out, err := d.newBuffer(int64(4 * n))
	if err != nil {
		return err
	}
	defer send(out.id, selRelease)
	args := argBytes(gridArgs{Out: out.addr, NY: int32(testGrid[1])})
	if err := runLaunches(api, map[string]*computePipeline{"grid_ids": p}, []Launch{{Kernel: "grid_ids", Grid: testGrid, Threads: testThreads, Args: args}}); err != nil {
		return err
	}
	return checkGrid(out.data)
}

// barrierStress runs the stress plan through the real encoder with the plan's barriers
// (every element must end at steps·adds), then without them (a race; reported, since a
// GPU may happen to serialise the dispatches).
func barrierStress(d *device, api *metalAPI) (string, error) {
	const adds, elems, steps = 64, 1 << 20, 3
	run := func(barriers bool) ([]float32, error) {
		p := stressPlan(adds, elems, barriers)
		res := Resources{Buffers: make([]Buffer, len(p.Buffers))}
		var owned []*buffer
		defer func() {
			for _, b := range owned {
				send(b.id, selRelease)
			}
		}()
		for _, b := range p.Buffers[1:] {
			buf, err := d.newBuffer(b.Bytes)
			if err != nil {
				return nil, err
			}
			owned = append(owned, buf)
			res.Buffers[b.ID] = buf
			res.Resident = append(res.Resident, buf)
		}
		ones := res.Buffers[2].Contents()
		for i := 0; i < elems; i++ {
			binary.LittleEndian.PutUint32(ones[4*i:], math.Float32bits(1))
		}
		for s := 0; s < 2; s++ {
			sb, err := d.newBuffer(64)
			if err != nil {
				return nil, err
			}
			owned = append(owned, sb)
			res.Steps = append(res.Steps, sb)
			res.Resident = append(res.Resident, sb)
		}
		e, err := NewEncoder(api, Config{Concurrent: true, PlanBarriers: true, InFlight: 2}, p, res, addLowering{})
		if err != nil {
			return nil, err
		}
		for s := 0; s < steps; s++ {
			if _, err := e.Submit(Step{Pos: s, Capacity: 1, Tokens: []int32{0}}); err != nil {
				return nil, err
			}
		}
		if err := e.Drain(); err != nil {
			return nil, err
		}
		y := res.Buffers[1].Contents()
		out := make([]float32, elems)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(y[4*i:]))
		}
		return out, nil
	}
	with, err := run(true)
	if err != nil {
		return "", err
	}
	for i, v := range with {
		if v != adds*steps {
			return "", fmt.Errorf("with the plan's barriers element %d is %v, want %d", i, v, adds*steps)
		}
	}
	without, err := run(false)
	if err != nil {
		return "", err
	}
	wrong := 0
	for _, v := range without {
		if v != adds*steps {
			wrong++
		}
	}
	if wrong == 0 {
		return "with barriers: exact; without: no race observed this run (inconclusive, not a failure)", nil
	}
	return fmt.Sprintf("with barriers: exact; without: %d of %d elements wrong (the barriers are needed and work)", wrong, elems), nil
}

// checkDevice runs kernelcheck's cases on the GPU: every Alloc a shared buffer.
type checkDevice struct {
	d    *device
	api  *metalAPI
	bufs []*buffer
	err  error
}

func (c *checkDevice) Alloc(n int, fill byte) uint64 {
	b, err := c.d.newBuffer(int64(max(n, 16)))
	if err != nil {
		c.err = err
		return 0
	}
	for i := range b.data {
		b.data[i] = fill
	}
	c.bufs = append(c.bufs, b)
	return b.addr
}

func (c *checkDevice) Bytes(addr uint64, n int) []byte {
	for _, b := range c.bufs {
		if addr >= b.addr && addr+uint64(n) <= b.addr+uint64(len(b.data)) {
			return b.data[addr-b.addr:][:n]
		}
	}
	return nil
}

func (c *checkDevice) Run(ls []kernelcheck.Launch) error {
	if c.err != nil {
		return c.err
	}
	launches := make([]Launch, len(ls))
	for i, l := range ls {
		launches[i] = Launch{Kernel: l.Kernel, Grid: l.Grid, Threads: l.Threads, Args: kernelcheck.ArgBytes(l.Args)}
	}
	return runLaunches(c.api, c.d.pipelines, launches)
}

func (c *checkDevice) release() {
	for _, b := range c.bufs {
		send(b.id, selRelease)
	}
	c.bufs = nil
}
