package metal

import (
	"encoding/binary"
	"fmt"

	"pistil/graph"
	"pistil/ops/kernels"
	"pistil/plan"
)

// Report is what `pistil selftest metal` prints as JSON, for a Mac user to attach to a
// bug report.
type Report struct {
	OS        string         `json:"os"`
	Device    any            `json:"device,omitempty"`
	Pipelines any            `json:"pipelines,omitempty"`
	Checks    []Check        `json:"checks"`
	Skipped   []SkippedCheck `json:"skipped"`
	// Speed holds measured numbers (tok/s) on the model given, this machine only.
	Speed  map[string]float64 `json:"speed,omitempty"`
	Result string             `json:"result"` // PASS or FAIL
}

// Check is one self-test step.
type Check struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail,omitempty"`
}

// SkippedCheck is a step the self-test cannot run yet, and why.
type SkippedCheck struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Add records a check: passed when err is nil, else failed with err's text.
func (r *Report) Add(name string, err error, detail string) bool {
	c := Check{Name: name, Pass: err == nil, Detail: detail}
	if err != nil {
		c.Detail = err.Error()
	}
	r.Checks = append(r.Checks, c)
	return err == nil
}

// Skip records a check that could not run, and why.
func (r *Report) Skip(name, reason string) { r.Skipped = append(r.Skipped, SkippedCheck{name, reason}) }

// Finish sets Result: PASS when every check passed.
func (r *Report) Finish() {
	r.Result = "PASS"
	for _, c := range r.Checks {
		if !c.Pass {
			r.Result = "FAIL"
		}
	}
}

// gridSource is a kernel that writes every thread's group and thread position, so a
// mistake in passing MTLSize by value (swapped or garbled dimensions) cannot pass.
const gridSource = `
struct GridArgs { u64 Out; i32 NY, Pad; };
KERNEL(grid_ids, GridArgs) {
	i32 i = ((GROUP_ID_Z * a.NY + GROUP_ID_Y) * NUM_GROUPS_X + GROUP_ID_X) * GROUP_SIZE + THREAD_ID;
	PTR(u32, a.Out)[i] = (u32)GROUP_ID_X | ((u32)GROUP_ID_Y << 8) | ((u32)GROUP_ID_Z << 16) | ((u32)THREAD_ID << 24);
}
`

// gridArgs is gridSource's GridArgs.
type gridArgs struct {
	Out     uint64
	NY, Pad int32
}

// The grid of the grid-ID test: unequal dimensions.
var testGrid, testThreads = [3]int{12, 4, 2}, 64

// checkGrid verifies what grid_ids wrote.
func checkGrid(out []byte) error {
	g := testGrid
	for z := 0; z < g[2]; z++ {
		for y := 0; y < g[1]; y++ {
			for x := 0; x < g[0]; x++ {
				for t := 0; t < testThreads; t++ {
					i := ((z*g[1]+y)*g[0]+x)*testThreads + t
					want := uint32(x) | uint32(y)<<8 | uint32(z)<<16 | uint32(t)<<24
					if got := binary.LittleEndian.Uint32(out[4*i:]); got != want {
						return fmt.Errorf("thread %d of group (%d,%d,%d) wrote %#x, want %#x", t, x, y, z, got, want)
					}
				}
			}
		}
	}
	return nil
}

// stressPlan is a plan of n dispatches that each add 1 to every element of y in place,
// read by the barrier stress test: grouped one dispatch per group (every barrier the
// byte ranges require), or all in one group (no barrier: a race on a concurrent encoder).
func stressPlan(n, elems int, barriers bool) *plan.Plan {
	f32 := graph.Type{DType: graph.F32, Shape: graph.S(elems)}
	p := &plan.Plan{Model: "selftest", Phase: "barrier-stress", Tokens: 1, Buffers: []plan.Buffer{
		{ID: 0, Kind: plan.Input, Name: "tokens", Type: graph.Type{DType: graph.I32, Shape: graph.S(1)}, Bytes: 4},
		{ID: 1, Kind: plan.Scratch, Name: "y", Type: f32, Bytes: int64(4 * elems)},
		{ID: 2, Kind: plan.Scratch, Name: "ones", Type: f32, Bytes: int64(4 * elems)},
	}}
	y, ones := plan.Operand{Buffer: 1, Type: f32}, plan.Operand{Buffer: 2, Type: f32}
	for i := 0; i < n; i++ {
		p.Dispatches = append(p.Dispatches, plan.Dispatch{Index: i, Op: "add", Args: []plan.Operand{y, ones}, Results: []plan.Operand{y}})
		if barriers {
			p.Groups = append(p.Groups, plan.Group{First: i, Last: i, Barrier: "reads what the dispatch before wrote"})
		}
	}
	if !barriers {
		p.Groups = []plan.Group{{First: 0, Last: n - 1}}
	}
	return p
}

// addLowering lowers the stress plan's adds to the binary kernel.
type addLowering struct{}

func (addLowering) Lower(d *plan.Dispatch, args, results []Operand, steps uint64) ([][]Launch, error) {
	if d.Op != "add" {
		return nil, fmt.Errorf("the stress lowering has no %s", d.Op)
	}
	n := int32(args[0].Operand.Type.Shape[0].Const)
	a := kernels.BinaryArgs{A: args[0].Addr, B: args[1].Addr, Y: results[0].Addr, N: n, Op: kernels.BinaryAdd,
		ADType: kernels.DTF32, BDType: kernels.DTF32, Shape: [kernels.MaxRank]int32{1, 1, 1, n}, BStride: [kernels.MaxRank]int32{0, 0, 0, 1}}
	return [][]Launch{{{Kernel: kernels.KernelBinary, Grid: [3]int{(int(n) + 255) / 256, 1, 1}, Threads: 256, Args: argBytes(a)}}}, nil
}
