package ops

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"pistil/graph"
)

// TestFastActivations: the float32 sigmoid and SiLU against the float64 references over
// the range activations take, saturating cleanly at both ends. The relative error bound
// is 4e-7 plus 1e-7·|x|, the float32 rounding of the exponent x·log2 e (it matters only
// where sigmoid is tiny); below 2^-125 (x < -86) the fast ones are exactly 0.
func TestFastActivations(t *testing.T) {
	for x := float32(-100); x <= 100; x += 0.0371 {
		want := 1 / (1 + math.Exp(-float64(x)))
		rel := 4e-7 + 1e-7*math.Abs(float64(x))
		if got := float64(sigmoidF32(x)); math.Abs(got-want) > rel*want+1e-37 {
			t.Fatalf("sigmoidF32(%v) = %v, want %v", x, got, want)
		}
		if got, want := float64(siluF32(x)), float64(x)*want; math.Abs(got-want) > rel*math.Abs(want)+1e-35 {
			t.Fatalf("siluF32(%v) = %v, want %v", x, got, want)
		}
	}
	if sigmoidF32(200) != 1 || sigmoidF32(-200) != 0 {
		t.Errorf("sigmoidF32 does not saturate: %v, %v", sigmoidF32(200), sigmoidF32(-200))
	}
}

// TestSiLUGateKernels: siluGate's fast and reference paths agree, split over workers or
// not, with and without the up operand, with each vector SiLU of the machine (its tail
// in the scalar loop) and with none.
func TestSiLUGateKernels(t *testing.T) {
	saved := siluMulFast
	defer func() { siluMulFast = saved }()
	for _, set := range append(siluMulSets, siluMulSet{name: "scalar"}) {
		siluMulFast = set.fn
		siluGateKernels(t)
	}
}

func siluGateKernels(t *testing.T) {
	for _, n := range []int{37, 1 << 17} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i], u[i] = float32(i%200)/10-10, float32(i%7)-3
		}
		for _, up := range [][]float32{u, nil} {
			fast, ref := make([]float32, n), make([]float32, n)
			siluGate(&Env{Workers: 2}, fast, g, up)
			siluGate(&Env{Workers: 2, Kernels: KernelsReference}, ref, g, up)
			near(t, "siluGate", fast, ref, 1e-6)
		}
	}
}

// TestSiLUVectorKernel: each vector SiLU of the machine (siluMulSets: AVX-512, AVX2), with
// and without the up operand, against the float64 reference over the range activations
// take, at TestFastActivations' bound, saturating at ±200 as the scalar one does; a short
// tail it leaves to the scalar loop.
func TestSiLUVectorKernel(t *testing.T) {
	if len(siluMulSets) == 0 {
		t.Skip("no vector SiLU on this machine: siluGate runs the scalar loop")
	}
	for _, set := range siluMulSets {
		t.Run(set.name, func(t *testing.T) { siluVectorKernel(t, set) })
	}
}

func siluVectorKernel(t *testing.T, set siluMulSet) {
	siluMulFast := set.fn
	var g []float32
	for x := float32(-100); x <= 100; x += 0.0371 {
		g = append(g, x)
	}
	g = append(g, 200, -200, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30)
	g = g[:len(g)&^(set.lanes-1)]
	u := make([]float32, len(g))
	for i := range u {
		u[i] = float32(i%13) - 6.5
	}
	for _, up := range [][]float32{nil, u} {
		y := make([]float32, len(g)+5)
		if n := siluMulFast(y, g, up); n != len(g) {
			t.Fatalf("siluMulFast took %d of %d elements", n, len(g))
		}
		for i, x := range g {
			want := float64(x) / (1 + math.Exp(-float64(x)))
			if up != nil {
				want *= float64(up[i])
			}
			rel := 4e-7 + 1e-7*math.Abs(float64(x))
			if d := math.Abs(float64(y[i]) - want); d > rel*math.Abs(want)+1e-35 {
				t.Fatalf("element %d (x = %v, with up: %v) = %v, want %v", i, x, up != nil, y[i], want)
			}
		}
		if y[len(g)] != 0 {
			t.Fatalf("siluMulFast wrote past its elements")
		}
	}
	short := set.lanes - 1
	if n := siluMulFast(make([]float32, short), g[:short], nil); n != 0 {
		t.Fatalf("siluMulFast took %d of %d elements, want 0 (the scalar loop's)", n, short)
	}
}

// BenchmarkSiLUGate: the routed experts' SwiGLU of a 512-token chunk (512 x 8 rows of
// 512), one worker, with each vector SiLU (avx512, avx2) and with the scalar loop alone.
func BenchmarkSiLUGate(b *testing.B) {
	const n = 512 * 8 * 512
	g, u, y := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range g {
		g[i], u[i] = float32(i%200)/10-10, float32(i%7)-3
	}
	saved := siluMulFast
	defer func() { siluMulFast = saved }()
	for _, c := range append(siluMulSets, siluMulSet{name: "scalar"}) {
		b.Run(c.name, func(b *testing.B) {
			siluMulFast = c.fn
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				siluGate(&Env{Workers: 1}, y, g, u)
			}
		})
	}
}

// gated_rms_norm's fast path (the SiLU through each vector SiLU of the machine, the row's
// tail in the scalar loop, and the scalar loop alone) agrees with the reference at
// siluGate's bound: a decode row of the 35B-A3B's GDN (32 heads of 128), rows of 100 (a
// tail past the vector lanes), and the output written over z (the scalar path).
func TestGatedRMSNormFastPaths(t *testing.T) {
	rng := rand.New(rand.NewSource(41))
	saved := siluMulFast
	defer func() { siluMulFast = saved }()
	for _, shape := range [][]int{{1, 32, 128}, {3, 5, 100}} {
		x := randTensor(rng, 2, shape...)
		z := randTensor(rng, 6, shape...)
		w := randTensor(rng, 1, shape[2:]...)
		v := &graph.Value{Op: "gated_rms_norm", Attrs: graph.Attrs{"eps": 1e-6}}
		want := NewTensor(graph.F32, shape...)
		if err := refGatedRMSNorm(&Env{Kernels: KernelsReference}, v, []*Tensor{x, z, w}, []*Tensor{want}); err != nil {
			t.Fatal(err)
		}
		for _, set := range append(siluMulSets, siluMulSet{name: "scalar"}) {
			siluMulFast = set.fn
			got := NewTensor(graph.F32, shape...)
			if err := refGatedRMSNorm(&Env{Workers: 2}, v, []*Tensor{x, z, w}, []*Tensor{got}); err != nil {
				t.Fatal(err)
			}
			near(t, fmt.Sprintf("gated_rms_norm %v %s", shape, set.name), got.F32(), want.F32(), 1e-6)
			over := FromF32(append([]float32(nil), z.F32()...), shape...)
			if err := refGatedRMSNorm(&Env{Workers: 2}, v, []*Tensor{x, over, w}, []*Tensor{over}); err != nil {
				t.Fatal(err)
			}
			near(t, fmt.Sprintf("gated_rms_norm %v %s over z", shape, set.name), over.F32(), want.F32(), 1e-6)
		}
	}
}

// BenchmarkGatedRMSNorm: one decode step's GDN gated norm at the 35B-A3B's shapes (32
// heads of 128), with each vector SiLU and the scalar loop.
func BenchmarkGatedRMSNorm(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	shape := []int{1, 32, 128}
	x := randTensor(rng, 2, shape...)
	z := randTensor(rng, 6, shape...)
	w := randTensor(rng, 1, shape[2:]...)
	v := &graph.Value{Op: "gated_rms_norm", Attrs: graph.Attrs{"eps": 1e-6}}
	y := NewTensor(graph.F32, shape...)
	saved := siluMulFast
	defer func() { siluMulFast = saved }()
	for _, c := range append(siluMulSets, siluMulSet{name: "scalar"}) {
		b.Run(c.name, func(b *testing.B) {
			siluMulFast = c.fn
			for b.Loop() {
				if err := refGatedRMSNorm(&Env{Workers: 2}, v, []*Tensor{x, z, w}, []*Tensor{y}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
