//go:build linux

package cuda

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops/kernels"
	"pistil/plan"
)

// The model's decode matrix-vector shapes (issue 10): M output rows of K inputs.
var matvecShapes = []struct {
	name string
	M, K int
}{
	{"gdn-in-proj 2048x12352", 12352, 2048},
	{"attn-qkv 2048x9216", 9216, 2048},
	{"o-proj 4096x2048", 2048, 4096},
	{"expert-gate-up 2048x1024", 1024, 2048},
	{"expert-down 512x2048", 2048, 512},
	{"lm-head 2048x248320", 248320, 2048},
}

// BenchmarkMatvecBandwidth times the q4 matrix-vector kernel on each decode shape and
// reports the weight bytes it reads per second beside the device's own copy bandwidth
// (a device-to-device copy of 1 GiB, read + write counted): the yardstick for "70% of
// the measured copy bandwidth". PISTIL_MATVEC_KERNELS names kernels of the same
// arguments to compare (default: matvec_q4 and its tensor-core twins matvec_mma_q4,
// matvec_imma_q4 and matvec_staged_q4, each on the grid its lowering gives (until the
// fifteenth session the staged form ran on the 16-row grid, its second half of groups
// idle); others on matvec_q4's); each further kernel's result is checked against the
// first's. Weights under the L2's 50 MB stay in it between launches: the lm_head is the
// shape that measures memory.
//
//	go test -c -o cuda.test ./cuda && ./cuda.test -test.run '^$' -test.bench MatvecBandwidth
func BenchmarkMatvecBandwidth(b *testing.B) {
	if _, err := loadDriver(); err != nil {
		b.Skipf("no GPU: %v", err)
	}
	g, err := openDevice()
	if err != nil {
		b.Fatal(err)
	}
	names := []string{kernels.KernelMatvecQ4, kernels.KernelMatvecMMAQ4, kernels.KernelMatvecIMMAQ4, kernels.KernelMatvecStagedQ4}
	if env := os.Getenv("PISTIL_MATVEC_KERNELS"); env != "" {
		names = strings.Split(env, ",")
	}
	copyGBs := copyBandwidth(b, g)
	b.Logf("device-to-device copy: %.0f GB/s (read + write)", copyGBs)
	r := rand.New(rand.NewPCG(1, 2))
	be := &Backend{dev: g, weights: map[string]*deviceWeight{}}
	for _, sh := range matvecShapes {
		w := randtensor.Quant(r, graph.Q4, sh.M, sh.K)
		x := randtensor.F32(r, 1, sh.K)
		var dw *deviceWeight
		var xa, ya uint64
		err := g.do(func() error {
			var err error
			if dw, err = be.upload("w", w); err != nil {
				return err
			}
			if xa, err = g.alloc(int64(4 * sh.K)); err != nil {
				return err
			}
			if ya, err = g.alloc(int64(4 * sh.M)); err != nil {
				return err
			}
			return g.upload(xa, x.Data)
		})
		if err != nil {
			b.Fatal(err)
		}
		weightBytes := float64(len(w.Data) + len(w.Scales) + len(w.Biases))
		in := []gpu.Operand{denseOperand(xa, graph.F32, []int{1, sh.K}), {Addr: dw.w.Data, W: dw.w, DType: graph.Q4, Shape: []int{sh.M, sh.K}}}
		out := []gpu.Operand{denseOperand(ya, graph.F32, []int{1, sh.M})}
		l, err := gpu.CUDA.Lower(&plan.Dispatch{Op: "qmatmul"}, in, out, 0)
		if err != nil {
			b.Fatal(err)
		}
		// The tensor-core twins and their forms take the same arguments on their own grids.
		grids := map[string]*gpu.Launch{}
		for _, marks := range [][]string{{gpu.AttrMMAMatvec}, {gpu.AttrMMAMatvec, gpu.AttrIMMAMatvec},
			{gpu.AttrMMAMatvec, gpu.AttrStagedMatvec}} {
			attrs := graph.Attrs{}
			for _, m := range marks {
				attrs[m] = true
			}
			twin, err := gpu.CUDA.Lower(&plan.Dispatch{Op: "qmatmul", Attrs: attrs}, in, out, 0)
			if err != nil && !strings.Contains(err.Error(), "wider than") {
				b.Fatal(err)
			}
			if err == nil {
				grids[twin.Kernel] = twin
			}
		}
		var reference []byte
		for _, name := range names {
			b.Run(sh.name+"/"+name, func(b *testing.B) {
				grid, block := l.Grid, l.Block
				if twin, ok := grids[name]; ok {
					grid, block = twin.Grid, twin.Block
				}
				var ln *launch
				err := g.do(func() error {
					var err error
					ln, err = g.newLaunch(name, grid, block, l.Args, l.ArgsPointer())
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				ms := timeLaunches(b, g, ln, b.N)
				got := make([]byte, 4*sh.M)
				if err := g.do(func() error { return g.download(got, ya) }); err != nil {
					b.Fatal(err)
				}
				if name == names[0] {
					reference = got
				} else if d := maxAbsDiffF32(got, reference); d > 1e-3 {
					b.Errorf("%s differs from %s by %g", name, names[0], d)
				}
				gbs := weightBytes * float64(b.N) / (ms / 1e3) / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(100*gbs/copyGBs, "%copy")
				b.ReportMetric(ms*1e3/float64(b.N), "us/call")
			})
		}
		g.do(func() error {
			for _, a := range []uint64{dw.w.Data, dw.w.Scales, dw.w.Biases, xa, ya} {
				g.free(a)
			}
			return nil
		})
	}
}

// timeLaunches runs l n times between two events and returns the milliseconds between.
func timeLaunches(b *testing.B, g *device, l *launch, n int) float64 {
	var ms float32
	err := g.do(func() error {
		var start, end uintptr
		if err := g.d.check("cuEventCreate", g.d.cuEventCreate(&start, 0)); err != nil {
			return err
		}
		if err := g.d.check("cuEventCreate", g.d.cuEventCreate(&end, 0)); err != nil {
			return err
		}
		if err := g.run(l); err != nil { // warm (the first launch loads the module's code)
			return err
		}
		if err := g.d.check("cuEventRecord", g.d.cuEventRecord(start, g.stream)); err != nil {
			return err
		}
		for range n {
			if err := g.run(l); err != nil {
				return err
			}
		}
		if err := g.d.check("cuEventRecord", g.d.cuEventRecord(end, g.stream)); err != nil {
			return err
		}
		if err := g.d.check("cuEventSynchronize", g.d.cuEventSynchronize(end)); err != nil {
			return err
		}
		return g.d.check("cuEventElapsedTime", g.d.cuEventElapsedTime(&ms, start, end))
	})
	if err != nil {
		b.Fatal(err)
	}
	return float64(ms)
}

// copyBandwidth is the device-to-device copy rate of 1 GiB, read and write bytes both
// counted, best of 5.
func copyBandwidth(b *testing.B, g *device) float64 {
	const n = 1 << 30
	best := 0.0
	err := g.do(func() error {
		src, err := g.alloc(n)
		if err != nil {
			return err
		}
		defer g.free(src)
		dst, err := g.alloc(n)
		if err != nil {
			return err
		}
		defer g.free(dst)
		var start, end uintptr
		g.d.cuEventCreate(&start, 0)
		g.d.cuEventCreate(&end, 0)
		for range 5 {
			g.d.cuEventRecord(start, g.stream)
			if err := g.d.check("cuMemcpyDtoDAsync", g.d.cuMemcpyDtoDAsync(dst, src, n, g.stream)); err != nil {
				return err
			}
			g.d.cuEventRecord(end, g.stream)
			if err := g.d.check("cuEventSynchronize", g.d.cuEventSynchronize(end)); err != nil {
				return err
			}
			var ms float32
			g.d.cuEventElapsedTime(&ms, start, end)
			best = max(best, 2*n/(float64(ms)/1e3)/1e9)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return best
}

func maxAbsDiffF32(a, b []byte) float64 {
	worst := 0.0
	for i := 0; i+4 <= len(a) && i+4 <= len(b); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(a[i:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		worst = max(worst, math.Abs(float64(x-y)))
	}
	return worst
}
