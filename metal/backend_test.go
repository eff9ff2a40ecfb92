package metal

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"pistil/exec"
	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/models/checkpoint"
	"pistil/ops"
	"pistil/passes"
	"pistil/plan"
)

// hostDevice is a Device whose buffers are host memory and whose GPU address of a byte is
// its host address, so a test can follow every address the backend computes back to the
// bytes it names. It checks what Metal requires of no-copy buffers.
type hostDevice struct {
	fakeAPI
	page, maxLen int64
	bufs         []*fakeBuffer
	noCopy       int
}

func (d *hostDevice) Do(f func() error) error { return f() }

func (d *hostDevice) NewBuffer(n int64) (Buffer, error) {
	data := make([]byte, n)
	b := &fakeBuffer{addr: uint64(uintptr(unsafe.Pointer(&data[0]))), data: data}
	d.bufs = append(d.bufs, b)
	return b, nil
}

func (d *hostDevice) NewNoCopyBuffer(p unsafe.Pointer, n int64) (Buffer, error) {
	if uintptr(p)%uintptr(d.page) != 0 || n%d.page != 0 || n <= 0 || n > d.maxLen {
		return nil, fmt.Errorf("no-copy buffer of %d bytes at %p: not whole pages of %d within %d", n, p, d.page, d.maxLen)
	}
	d.noCopy++
	b := &fakeBuffer{addr: uint64(uintptr(p)), data: unsafe.Slice((*byte)(p), n)}
	d.bufs = append(d.bufs, b)
	return b, nil
}

func (d *hostDevice) MakeResident([]Buffer) error { return nil }
func (d *hostDevice) Release(Buffer)              {}
func (d *hostDevice) MaxBufferLength() int64      { return d.maxLen }
func (d *hostDevice) PageSize() int64             { return d.page }
func (d *hostDevice) Describe() string            { return "host memory" }

// at is the n bytes a device address names, or nil when no buffer holds them whole.
func (d *hostDevice) at(addr uint64, n int) []byte {
	for _, b := range d.bufs {
		if addr >= b.addr && addr+uint64(n) <= b.addr+uint64(len(b.data)) {
			return b.data[addr-b.addr:][:n]
		}
	}
	return nil
}

// Loading the tiny golden model's Metal plans binds every weight the kernels read: the
// checkpoint's own bytes through no-copy views over its mapping (split into overlapping
// views by a small fake maxBufferLength), the bytes a transform packed through copies; and
// every address in every Weight names exactly the tensor's bytes.
func TestLoadBindsEveryWeightAtItsBytes(t *testing.T) {
	ck, err := checkpoint.Open(fixtures.Golden("mlx-q4"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	g, err := exec.DeclareGraph(ck.Config(), ck.WeightType, "metal", graph.InvalidDType, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, maxLen := range []int64{1 << 30, 256 << 10} {
		t.Run(fmt.Sprintf("maxBufferLength %d", maxLen), func(t *testing.T) {
			d := &hostDevice{fakeAPI: fakeAPI{t: t}, page: 16 << 10, maxLen: maxLen}
			b := NewBackend(d, DefaultConfig)
			var plans []*plan.Plan
			for _, tokens := range []int{1, 8} {
				p, err := passes.Compile(g, ops.Default, exec.PhaseFor("metal", tokens, false, 0), mustPassConfig(t))
				if err != nil {
					t.Fatal(err)
				}
				plans = append(plans, p)
				if _, err := b.Load(p, ck.Tensor); err != nil {
					t.Fatal(err)
				}
			}
			checked := 0
			for _, p := range plans {
				for _, buf := range p.Buffers {
					if buf.Kind != plan.Weight {
						continue
					}
					tn, err := ck.Tensor(buf.Name)
					if err != nil {
						t.Fatal(err)
					}
					data, scales, biases, err := packed(tn)
					if err != nil {
						t.Fatal(err)
					}
					w := b.weights[buf.Name].W
					for _, part := range []struct {
						what string
						addr uint64
						want []byte
					}{{"data", w.Data, data}, {"scales", w.Scales, scales}, {"biases", w.Biases, biases}} {
						if len(part.want) == 0 {
							continue
						}
						if got := d.at(part.addr, len(part.want)); !bytes.Equal(got, part.want) {
							t.Fatalf("%s %s: address %#x does not hold the tensor's %d bytes", buf.Name, part.what, part.addr, len(part.want))
						}
						checked++
					}
				}
			}
			if d.noCopy == 0 || b.noCopy == 0 {
				t.Errorf("no weight was bound without a copy (%d views)", d.noCopy)
			}
			if maxLen < 1<<20 && d.noCopy < 2 {
				t.Errorf("a %d-byte limit gave %d views for a %.1f MB checkpoint", maxLen, d.noCopy, float64(b.noCopy)/1e6)
			}
			t.Logf("%d weight parts at their bytes; %d no-copy views (%d KiB), %d KiB copied", checked, d.noCopy, b.noCopy>>10, b.copied>>10)
		})
	}
}
