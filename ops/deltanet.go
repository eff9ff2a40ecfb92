package ops

import (
	"fmt"
	"math"

	"pistil/graph"
)

// The gated delta rule (model-spec.md §2.5) over a float32 recurrent state S[Hv, Dk, Dv]:
// per value head j (key head j/(Hv/Hk)) and token t, with α = exp(g), β = beta,
//
//	S ← α·S;  S ← S + k ⊗ β·(v − Sᵀk);  o = Sᵀq
//
// The decay comes before the retrieval Sᵀk. Two forms compute the same thing: the
// recurrent one token at a time, and the chunked (WY/UT) one a chunk of tokens at a time
// with small matrix products (§2.6), which is what GPU prefill kernels do.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "gated_delta",
			Doc:  "gated delta rule (q,k f32[T,Hk,Dk], v f32[T,Hv,Dv], g,beta f32[T,Hv], S f32[Hv,Dk,Dv]) -> (o f32[T,Hv,Dv], S')",
			Args: 6, Flags: graph.StateUpdate, Attrs: []string{"form", "chunk"}, Infer: inferGatedDelta},
		Cost: costGatedDelta,
		Ref:  refGatedDelta,
	})
}

func inferGatedDelta(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 6); err != nil {
		return graph.Type{}, err
	}
	q, err := wantRank(v, 0, "q", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	k, err := wantRank(v, 1, "k", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	val, err := wantRank(v, 2, "v", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	g, err := wantRank(v, 3, "g", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	beta, err := wantRank(v, 4, "beta", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	S, err := wantRank(v, 5, "S", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if !q.Shape.Equal(k.Shape) {
		return graph.Type{}, fmt.Errorf("q %s and k %s differ in shape", q.Shape, k.Shape)
	}
	T, Hv := val.Shape[0], val.Shape[1]
	checks := []struct {
		what string
		a, b graph.Dim
	}{
		{"tokens (q vs v)", q.Shape[0], T},
		{"tokens (g vs v)", g.Shape[0], T},
		{"value heads (g vs v)", g.Shape[1], Hv},
		{"tokens (beta vs v)", beta.Shape[0], T},
		{"value heads (beta vs v)", beta.Shape[1], Hv},
		{"value heads (S vs v)", S.Shape[0], Hv},
		{"key dim (S vs k)", S.Shape[1], k.Shape[2]},
		{"value dim (S vs v)", S.Shape[2], val.Shape[2]},
	}
	for _, c := range checks {
		if err := sameDim(c.what, c.a, c.b); err != nil {
			return graph.Type{}, err
		}
	}
	hk, err := constDim("key heads", k.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	hv, err := constDim("value heads", Hv)
	if err != nil {
		return graph.Type{}, err
	}
	if hk == 0 || hv%hk != 0 {
		return graph.Type{}, fmt.Errorf("value heads %d are not a multiple of key heads %d", hv, hk)
	}
	if err := requireAttrs(v, "form", "chunk"); err != nil {
		return graph.Type{}, err
	}
	switch f := v.Attrs.String("form"); f {
	case "recurrent", "chunked":
	default:
		return graph.Type{}, fmt.Errorf("gated_delta form %q: want recurrent or chunked", f)
	}
	if c := v.Attrs.Int("chunk"); c < 1 {
		return graph.Type{}, fmt.Errorf("gated_delta chunk %d must be positive", c)
	}
	return graph.Tuple(f32(val.Shape...), S), nil
}

func costGatedDelta(v *graph.Value, b graph.Bindings) Cost {
	c := plainCost(v, b, 0)
	S := arg(v, 5)
	// Per token and value head: decay, retrieval, rank-1 update and readout, each one pass
	// over the Dk×Dv state.
	c.Flops = int64(arg(v, 2).Shape[0].Eval(b)) * elemsOf(S, b) * 7
	return c
}

// deltaDims are the bound sizes of one gated_delta call.
type deltaDims struct{ T, Hk, Hv, Dk, Dv int }

func refGatedDelta(env *Env, v *graph.Value, in, out []*Tensor) error {
	d := deltaDims{T: in[0].Shape[0], Hk: in[0].Shape[1], Dk: in[0].Shape[2], Hv: in[2].Shape[1], Dv: in[2].Shape[2]}
	S := out[1].F32()
	if src := in[5].F32(); len(src) > 0 && &src[0] != &S[0] {
		copy(S, src)
	}
	q, k, val, g, beta, o := in[0].F32(), in[1].F32(), in[2].F32(), in[3].F32(), in[4].F32(), out[0].F32()
	chunked := v.Attrs.String("form") == "chunked"
	chunk := max(v.Attrs.Int("chunk"), 1)
	fast := !env.referenceKernels() && gdnStepFast != nil
	parallelItems(env, d.Hv, func(_, j int) {
		h := deltaHead{d: d, j: j, kh: j / (d.Hv / d.Hk), q: q, k: k, v: val, g: g, beta: beta, o: o,
			S: S[j*d.Dk*d.Dv : (j+1)*d.Dk*d.Dv], fast: fast}
		if chunked {
			for t0 := 0; t0 < d.T; t0 += chunk {
				h.chunk(t0, min(t0+chunk, d.T))
			}
		} else {
			h.recurrent()
		}
	})
	return nil
}

// deltaHead is one value head's view of the inputs and its slice of the state.
type deltaHead struct {
	d                   deltaDims
	j, kh               int
	q, k, v, g, beta, o []float32
	S                   []float32 // [Dk][Dv]
	fast                bool      // recurrent steps through gdnStepFast
}

// gdnStepFast, where the machine has one (the amd64 init), is one recurrent step of one
// head: decay, retrieval, update and readout, with S read from memory once; it reports
// false for shapes it does not take. The portable loop of recurrent is its oracle.
var gdnStepFast func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool

// gdnStepKernels are the machine's fast step kernels by name (the tests hold them to each
// other's bits); gdnStepFast is the widest.
var gdnStepKernels = map[string]func(S []float32, Dk, Dv int, decay, beta float32, q, k, v, o []float32) bool{}

func (h *deltaHead) qk(t int) (q, k []float32) {
	off := (t*h.d.Hk + h.kh) * h.d.Dk
	return h.q[off : off+h.d.Dk], h.k[off : off+h.d.Dk]
}

func (h *deltaHead) vo(t int) (v, o []float32) {
	off := (t*h.d.Hv + h.j) * h.d.Dv
	return h.v[off : off+h.d.Dv], h.o[off : off+h.d.Dv]
}

// recurrent applies the rule token by token: two passes over S per token.
func (h *deltaHead) recurrent() {
	if h.fast && h.d.T > 1 && h.recurrentTiled() {
		return
	}
	h.recurrentByToken()
}

// gdnTileCols is the state columns recurrentTiled keeps in L1 at a time: the fast step's
// own column tile (32 for gdnStepAVX2, 64 for gdnStepAVX512: 16 and 32 KiB of state at
// Dk = 128); 32 where the state's rows do not hold whole tiles of it.
var gdnTileCols = 32

// recurrentTiled is recurrent for several tokens under the fast step, with the loops the
// other way round: each state column evolves on its own (column m's decay, retrieval,
// delta, update and readout read column m and the token's q, k, v only), so a tile of
// gdnTileCols columns, packed contiguous, takes every token of the chunk while it sits in
// L1, instead of the whole state (64 KiB a head) passing through L2 once per token. The
// arithmetic of each column is the by-token path's, so are the bits
// (TestGatedDeltaTiledMatchesByToken). It reports false, having changed nothing, where
// the fast step does not take the tile.
func (h *deltaHead) recurrentTiled() bool {
	Dk, Dv, T := h.d.Dk, h.d.Dv, h.d.T
	w := gdnTileCols
	if Dv%w != 0 {
		w = 32
	}
	if Dv%w != 0 {
		return false
	}
	decays := make([]float32, T)
	for t := range decays {
		decays[t] = float32(math.Exp(float64(h.g[t*h.d.Hv+h.j])))
	}
	tile := make([]float32, Dk*w)
	for c0 := 0; c0 < Dv; c0 += w {
		for i := 0; i < Dk; i++ {
			copy(tile[i*w:(i+1)*w], h.S[i*Dv+c0:i*Dv+c0+w])
		}
		for t := 0; t < T; t++ {
			q, k := h.qk(t)
			v, o := h.vo(t)
			if !gdnStepFast(tile, Dk, w, decays[t], h.beta[t*h.d.Hv+h.j], q, k, v[c0:c0+w], o[c0:c0+w]) {
				if c0 == 0 && t == 0 {
					return false // nothing written yet
				}
				panic("ops: the fast gated delta step refused a tile it took before")
			}
		}
		for i := 0; i < Dk; i++ {
			copy(h.S[i*Dv+c0:i*Dv+c0+w], tile[i*w:(i+1)*w])
		}
	}
	return true
}

// recurrentByToken is recurrent one token at a time over the whole state.
func (h *deltaHead) recurrentByToken() {
	Dk, Dv := h.d.Dk, h.d.Dv
	var mem []float32 // the portable loop's retrieval, made when it first runs
	for t := 0; t < h.d.T; t++ {
		q, k := h.qk(t)
		v, o := h.vo(t)
		decay := float32(math.Exp(float64(h.g[t*h.d.Hv+h.j])))
		beta := h.beta[t*h.d.Hv+h.j]
		if h.fast && gdnStepFast(h.S, Dk, Dv, decay, beta, q, k, v, o) {
			continue
		}
		if mem == nil {
			mem = make([]float32, Dv)
		}
		clear(mem)
		for i := 0; i < Dk; i++ {
			row := h.S[i*Dv : (i+1)*Dv]
			for m := range row {
				row[m] *= decay
			}
			axpy(k[i], row, mem)
		}
		for m := range mem {
			mem[m] = beta * (v[m] - mem[m]) // now the delta
		}
		clear(o)
		for i := 0; i < Dk; i++ {
			row := h.S[i*Dv : (i+1)*Dv]
			axpy(k[i], mem, row)
			axpy(q[i], row, o)
		}
	}
}

// chunk applies tokens [t0, t1) at once in the WY/UT form of model-spec.md §2.6, with
// γ the cumulative log-decay inside the chunk and Γ_ij = exp(γ_i − γ_j) for i >= j:
//
//	A_ij = β_i (k_i·k_j) Γ_ij (i > j);  U = (I+A)⁻¹ diag(β) V;  W = (I+A)⁻¹ diag(β e^γ) K
//	V' = U − W·S;  O = diag(e^γ) Q·S + ((Q Kᵀ) ⊙ Γ)·V';  S ← e^{γ_last} S + (diag(e^{γ_last−γ}) K)ᵀ V'
func (h *deltaHead) chunk(t0, t1 int) {
	n, Dk, Dv := t1-t0, h.d.Dk, h.d.Dv
	gamma := make([]float64, n)
	var acc float64
	for i := 0; i < n; i++ {
		acc += float64(h.g[(t0+i)*h.d.Hv+h.j])
		gamma[i] = acc
	}
	betaAt := func(i int) float32 { return h.beta[(t0+i)*h.d.Hv+h.j] }
	decayBetween := func(i, j int) float32 { return float32(math.Exp(gamma[i] - gamma[j])) }

	// A (strictly lower), then U and W by forward substitution through (I + A).
	A := make([]float32, n*n)
	for i := 0; i < n; i++ {
		_, ki := h.qk(t0 + i)
		for j := 0; j < i; j++ {
			_, kj := h.qk(t0 + j)
			A[i*n+j] = betaAt(i) * dot(ki, kj) * decayBetween(i, j)
		}
	}
	U := make([]float32, n*Dv)
	W := make([]float32, n*Dk)
	for i := 0; i < n; i++ {
		_, ki := h.qk(t0 + i)
		vi, _ := h.vo(t0 + i)
		ui, wi := U[i*Dv:(i+1)*Dv], W[i*Dk:(i+1)*Dk]
		b := betaAt(i)
		bw := b * float32(math.Exp(gamma[i]))
		for m := range ui {
			ui[m] = b * vi[m]
		}
		for a := range wi {
			wi[a] = bw * ki[a]
		}
		for j := 0; j < i; j++ {
			axpy(-A[i*n+j], U[j*Dv:(j+1)*Dv], ui)
			axpy(-A[i*n+j], W[j*Dk:(j+1)*Dk], wi)
		}
	}
	// V' = U − W·S, overwriting U.
	for i := 0; i < n; i++ {
		ui, wi := U[i*Dv:(i+1)*Dv], W[i*Dk:(i+1)*Dk]
		for a := 0; a < Dk; a++ {
			axpy(-wi[a], h.S[a*Dv:(a+1)*Dv], ui)
		}
	}
	// O_i = e^{γ_i} q_i·S + Σ_{j<=i} (q_i·k_j) Γ_ij V'_j, with the old S.
	for i := 0; i < n; i++ {
		qi, _ := h.qk(t0 + i)
		_, oi := h.vo(t0 + i)
		clear(oi)
		for a := 0; a < Dk; a++ {
			axpy(qi[a], h.S[a*Dv:(a+1)*Dv], oi)
		}
		scale := float32(math.Exp(gamma[i]))
		for m := range oi {
			oi[m] *= scale
		}
		for j := 0; j <= i; j++ {
			_, kj := h.qk(t0 + j)
			axpy(dot(qi, kj)*decayBetween(i, j), U[j*Dv:(j+1)*Dv], oi)
		}
	}
	// S ← e^{γ_last} S + Σ_j e^{γ_last − γ_j} k_j ⊗ V'_j.
	lastDecay := float32(math.Exp(gamma[n-1]))
	for m := range h.S {
		h.S[m] *= lastDecay
	}
	for j := 0; j < n; j++ {
		_, kj := h.qk(t0 + j)
		w := decayBetween(n-1, j)
		vj := U[j*Dv : (j+1)*Dv]
		for a := 0; a < Dk; a++ {
			axpy(w*kj[a], vj, h.S[a*Dv:(a+1)*Dv])
		}
	}
}
