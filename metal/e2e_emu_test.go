package metal

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	_ "pistil/cpu"
	"pistil/exec"
	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/fixtures"
	"pistil/models/checkpoint"
	"pistil/ops"
	"pistil/ops/kernels"
	"pistil/ops/kernels/emu"
	"pistil/passes"
	"pistil/pipeline"
	"pistil/plan"
)

// The tiny golden model end to end on the CPU emulator of Metal: the plans compiled for
// metal, lowered by gpu.Metal, encoded by the real encoder, every kernel run as its MSL
// translation under Metal's execution model, against the CPU backend on the same prompt:
// a prefill of 8 tokens, then 2 decode steps, the next token chosen on the GPU.
func TestTinyModelOnTheEmulator(t *testing.T) {
	m := emulator(t)
	if testing.Short() {
		t.Skip("the end-to-end emulation takes a while (-short)")
	}
	dir := fixtures.Golden("mlx-q4")
	const T, N = 8, 32
	prompt := []int32{11, 300, 7, 42, 5, 99, 256, 3}

	// The CPU backend's logits: after the prompt, then after each greedy token.
	cpuModel, err := exec.Open(dir, exec.Options{Backend: "cpu", Chunk: T, Passes: mustPassConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cpuModel.Close()
	sess, err := cpuModel.NewSession(N)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sess.Prefill(ctx, prompt, exec.PrefillOptions{}); err != nil {
		t.Fatal(err)
	}
	want := [][]float32{append([]float32(nil), sess.Logits()...)}
	for step := 0; step < 2; step++ {
		tok := int32(argmaxOf(want[len(want)-1]))
		if err := sess.Decode(ctx, tok); err != nil {
			t.Fatal(err)
		}
		want = append(want, append([]float32(nil), sess.Logits()...))
	}

	// The same on the emulator.
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	g, err := exec.DeclareGraph(ck.Config(), ck.WeightType, "metal", false)
	if err != nil {
		t.Fatal(err)
	}
	api := &emuAPI{m: m, mem: &emu.Memory{}}
	weights, states := map[string]Operand{}, map[string]*emuBuffer{}
	bind := func(p *plan.Plan) (Resources, int) {
		res := Resources{Buffers: make([]Buffer, len(p.Buffers)), Weights: map[int]Operand{}}
		logits := -1
		for _, b := range p.Buffers {
			switch b.Kind {
			case plan.Weight:
				w, ok := weights[b.Name]
				if !ok {
					tn, err := ck.Tensor(b.Name)
					if err != nil {
						t.Fatal(err)
					}
					w = uploadWeight(t, api, tn)
					weights[b.Name] = w
				}
				res.Weights[b.ID] = w
			case plan.State:
				s, ok := states[b.Name]
				if !ok {
					s = api.buffer(int(b.Size(N)))
					states[b.Name] = s
				}
				res.Buffers[b.ID] = s
			case plan.Scratch, plan.Output:
				res.Buffers[b.ID] = api.buffer(int(b.Size(N)))
				if b.Name == "logits" {
					logits = b.ID
				}
			}
		}
		res.Steps = []Buffer{api.buffer(16 + 4*p.Tokens), api.buffer(16 + 4*p.Tokens)}
		return res, logits
	}
	compile := func(tokens int) *plan.Plan {
		p, err := passes.Compile(g, ops.Default, exec.PhaseFor("metal", tokens, false, 0), mustPassConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pre, dec := compile(T), compile(1)
	preRes, preLogits := bind(pre)
	decRes, decLogits := bind(dec)
	low := func(p *plan.Plan) Lowering {
		return GPULowering{Target: gpu.Metal, Bind: graph.Bindings{T: p.Tokens, N: N}}
	}
	encPre, err := NewEncoder(api, Config{Concurrent: true, PlanBarriers: true, InFlight: 1}, pre, preRes, low(pre))
	if err != nil {
		t.Fatal(err)
	}
	encDec, err := NewEncoder(api, DefaultConfig, dec, decRes, low(dec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := encPre.Submit(Step{Pos: 0, Capacity: N, Tokens: prompt}); err != nil {
		t.Fatal(err)
	}
	if err := encPre.Drain(); err != nil {
		t.Fatal(err)
	}
	got := [][]float32{floats(preRes.Buffers[preLogits].Contents())}
	for step := 0; step < 2; step++ {
		st := Step{Pos: T + step, Capacity: N}
		if step == 0 {
			// The first decode token comes from the prefill's logits, chosen on the CPU
			// here; after that the decode plan's own argmax hands it over on the GPU.
			st.Tokens = []int32{int32(argmaxOf(got[0]))}
		}
		tk, err := encDec.Submit(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := encDec.Wait(tk); err != nil {
			t.Fatal(err)
		}
		got = append(got, floats(decRes.Buffers[decLogits].Contents()))
		if step == 0 && encDec.Token(tk) != int32(argmaxOf(got[1])) {
			t.Errorf("the GPU's argmax handed over %d, the logits' argmax is %d", encDec.Token(tk), argmaxOf(got[1]))
		}
	}
	for i := range want {
		var maxErr, maxRef float64
		for k := range want[i] {
			maxErr = max(maxErr, math.Abs(float64(want[i][k]-got[i][k])))
			maxRef = max(maxRef, math.Abs(float64(want[i][k])))
		}
		if math.IsNaN(maxErr) || maxErr > 2e-3*max(maxRef, 1) {
			t.Errorf("step %d: max |logit error| %.3g (largest |logit| %.3g)", i, maxErr, maxRef)
		}
		if a, b := argmaxOf(want[i]), argmaxOf(got[i]); a != b {
			t.Errorf("step %d: emulated Metal picks token %d, the CPU %d", i, b, a)
		}
		t.Logf("step %d: max |logit error| %.2g of largest %.2g", i, maxErr, maxRef)
	}
}

func mustPassConfig(t *testing.T) passes.Config {
	cfg, err := pipeline.Default().PassConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func uploadWeight(t *testing.T, api *emuAPI, tn *ops.Tensor) Operand {
	data, scales, biases, err := packed(tn)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) uint64 {
		if len(b) == 0 {
			return 0
		}
		buf := api.buffer(len(b))
		copy(buf.Contents(), b)
		return buf.addr
	}
	code, err := dtypeCode(tn.DType)
	if err != nil {
		t.Fatal(err)
	}
	w := kernels.Weight{Data: put(data), Scales: put(scales), Biases: put(biases), DType: code, Group: int32(tn.Group)}
	return Operand{Addr: w.Data, W: w}
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func argmaxOf(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
