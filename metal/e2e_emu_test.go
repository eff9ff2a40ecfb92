package metal

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"unsafe"

	"pistil/exec"
	"pistil/internal/fixtures"
	"pistil/ops/kernels/emu"
	"pistil/passes"
	"pistil/pipeline"
	"pistil/verify"
)

// emuDevice is the backend's Device over the CPU emulator. It has no host mapping to wrap,
// so every weight takes the copy path (no-copy views are what only a Mac can exercise).
type emuDevice struct{ emuAPI }

func (d *emuDevice) Do(f func() error) error           { return f() }
func (d *emuDevice) NewBuffer(n int64) (Buffer, error) { return d.buffer(int(n)), nil }
func (d *emuDevice) NewNoCopyBuffer(unsafe.Pointer, int64) (Buffer, error) {
	return nil, errors.New("the emulator's memory cannot wrap host pages")
}
func (d *emuDevice) MakeResident([]Buffer) error { return nil }
func (d *emuDevice) Release(Buffer)              {}
func (d *emuDevice) MaxBufferLength() int64      { return 1 << 34 }
func (d *emuDevice) PageSize() int64             { return 16 << 10 }
func (d *emuDevice) Describe() string            { return "the CPU emulator of Metal" }

// emulatedPositions of the golden reference are compared on emulated Metal, the first
// emulatedPrefill prefilled and the rest decoded: enough to cross the plans, short
// enough for the emulator.
const emulatedPositions, emulatedPrefill = 16, 12

// emulatedGolden registers the Metal backend over the emulator for the test (skipped in
// -short: the end-to-end emulation takes a while) and returns the mlx-q4 golden fixture's
// directory and its reference cut to emulatedPositions.
func emulatedGolden(t *testing.T) (string, *verify.Reference) {
	t.Helper()
	m := emulator(t)
	if testing.Short() {
		t.Skip("the end-to-end emulation takes a while (-short)")
	}
	exec.RegisterBackend("metal", func(exec.BackendOptions) (exec.Backend, error) {
		return NewBackend(&emuDevice{emuAPI{m: m, mem: &emu.Memory{}}}, DefaultConfig), nil
	})
	t.Cleanup(func() {
		exec.RegisterBackend("metal", func(exec.BackendOptions) (exec.Backend, error) { return nil, ErrUnavailable })
	})
	dir := fixtures.Golden("mlx-q4")
	ref, err := verify.LoadReference(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := emulatedPositions
	ref.Tokens, ref.Logits, ref.GenTokens, ref.GenLogits = ref.Tokens[:n], ref.Logits[:n], nil, nil
	return dir, ref
}

// pistil check on emulated Metal: the tiny golden model opened through exec with the Metal
// backend over the emulator (the plans exec compiles for metal, gpu.Metal's lowering, the
// real encoder and backend, every kernel's MSL under Metal's execution model), its logits
// compared with transformers' reference at 16 prompt positions, the first 12 prefilled and
// the last 4 through the decode plan, at pistil check's tolerances.
func TestCheckOnEmulatedMetal(t *testing.T) {
	dir, ref := emulatedGolden(t)
	model, err := exec.Open(dir, exec.Options{Backend: "metal", AllLogits: true, Chunk: emulatedPrefill, Passes: mustPassConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	rep, err := verify.Run(context.Background(), model, ref, verify.Options{DecodeFrom: emulatedPrefill})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("emulated Metal vs transformers: %s", oneLine(rep.String()))
	if rep.MaxAbsErr > 2e-3 || rep.Top1Agree < 1 {
		t.Errorf("max abs logit error %.3g (tolerance 2e-3), top-1 agreement %.4f (want 1)", rep.MaxAbsErr, rep.Top1Agree)
	}
	if r := rep.PPLRatio(); r > 1.01 || 1/r > 1.01 {
		t.Errorf("perplexity ratio %.5f", r)
	}
	if got := model.Backend().(*Backend).Device(); got == "" {
		t.Error("no device description")
	} else {
		t.Log(got)
	}
}

func oneLine(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == '\n' {
			out[i] = ';'
		}
	}
	return string(out)
}

func mustPassConfig(t *testing.T) passes.Config {
	cfg, err := pipeline.Default().PassConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
