package ops

import (
	"fmt"
	"math"
	"sync"

	"pistil/graph"
)

// Sparse mixture of experts: routing (softmax, top-k, renormalise), the per-token expert
// matmuls over a stacked weight [E, M, K], and the weighted combine.

func init() {
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "router", Doc: "fp32 softmax over E, top-{k}, renormalise -> (weights f32[T,k], ids i32[T,k])",
			Args: 1, Attrs: []string{"k"}, Infer: inferRouter},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			c := plainCost(v, b, 0)
			c.Flops = elemsOf(arg(v, 0), b) * 6
			return c
		},
		Ref: refRouter,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "expert_matmul",
			Doc: "row (t,j) = x(t[,j]) · W[ids[t,j]]ᵀ, W f32/bf16/f16 [E,M,K] -> f32[T,k,M]", Args: 3,
			Infer: func(v *graph.Value) (graph.Type, error) { return inferExpertMatmul(v, floatDTypes) }},
		Cost: costExpertMatmul,
		Ref:  refExpertMatmul,
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "expert_qmatmul",
			Doc: "expert_matmul with q4/q8 W dequantized on the fly = expert_matmul(x, dequant(W), ids)", Args: 3,
			Infer: func(v *graph.Value) (graph.Type, error) {
				return inferExpertMatmul(v, []graph.DType{graph.Q4, graph.Q8})
			}},
		Cost: costExpertMatmul,
		Ref:  refExpertMatmul,
		Expand: func(b *graph.Builder, v *graph.Value) *graph.Value {
			return b.Named("expert_matmul", v.Name, nil, v.Args[0], b.Op("dequant", nil, v.Args[1]), v.Args[2])
		},
	})
	Default.Register(&Info{
		OpDef: graph.OpDef{Name: "moe_combine", Doc: "Σ_j w[t,j]·y[t,j,:]: y f32[T,k,H], w f32[T,k] -> f32[T,H]", Args: 2,
			Infer: inferMoECombine},
		Cost: func(v *graph.Value, b graph.Bindings) Cost {
			c := plainCost(v, b, 0)
			c.Flops = 2 * elemsOf(arg(v, 0), b)
			return c
		},
		Ref: refMoECombine,
	})
}

func inferRouter(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 1); err != nil {
		return graph.Type{}, err
	}
	x, err := wantRank(v, 0, "logits", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := requireAttrs(v, "k"); err != nil {
		return graph.Type{}, err
	}
	E, err := constDim("expert count", x.Shape[1])
	if err != nil {
		return graph.Type{}, err
	}
	k := v.Attrs.Int("k")
	if k < 1 || k > E {
		return graph.Type{}, fmt.Errorf("router k = %d must be in [1, %d]", k, E)
	}
	T := x.Shape[0]
	return graph.Tuple(f32(T, graph.D(k)), graph.TensorType(graph.I32, T, graph.D(k))), nil
}

// refRouter picks, per token, the k largest softmax probabilities (ties to the lower
// expert id) and renormalises them to sum to 1. Tokens are independent: a prefill step's
// run in parallel (routerParallelFrom), decode's one token on the caller.
func refRouter(env *Env, v *graph.Value, in, out []*Tensor) error {
	T, E := in[0].Shape[0], in[0].Shape[1]
	k := v.Attrs.Int("k")
	logits, weights, ids := in[0].F32(), out[0].F32(), out[1].I32()
	if T < routerParallelFrom {
		env = env.serial()
	}
	bad := make([]int, env.workers()) // per chunk, the first token with non-finite logits, or -1
	for i := range bad {
		bad[i] = -1
	}
	parallelChunks(env, T, func(chunk, lo, hi int) {
		bad[chunk] = routeTokens(!env.referenceKernels(), logits, weights, ids, E, k, lo, hi)
	})
	for _, t := range bad { // chunks in token order: the first bad token
		if t >= 0 {
			return fmt.Errorf("router: token %d has non-finite logits", t)
		}
	}
	return nil
}

// routerParallelFrom is the fewest tokens whose routing is split across the workers:
// the 35B-A3B's router over 256 experts takes a few microseconds a token, so a join
// pays for itself only over a prefill step's tokens (a 512-token chunk's router loop
// was about 3% of an int8 prefill on one core of two: cpu/README.md, session 11).
const routerParallelFrom = 16

// routeTokens routes tokens [lo, hi) (refRouter) and returns the first of them whose
// logits are not finite, or -1. The top k are kept in one pass, a list sorted by
// probability (ties: the lower expert first) that a candidate enters only by beating its
// last: the experts and weights of k passes that each take the largest left, lowest id
// first (routeTokensByPasses, the test's oracle): about 4.3-5.5 against 6.3-7.3 us a
// token at E = 256, k = 8, the rest being the 256 exponentials (expShifted: eight at a
// time where the machine has the vector kernel).
func routeTokens(fast bool, logits, weights []float32, ids []int32, E, k, lo, hi int) int {
	p := make([]float32, E)
	topP, topE := make([]float32, k), make([]int32, k)
	for t := lo; t < hi; t++ {
		row := logits[t*E : (t+1)*E]
		maxL := float32(math.Inf(-1))
		for _, l := range row {
			maxL = max(maxL, l)
		}
		expShifted(fast, p, row, maxL)
		var sum float32
		for _, pe := range p {
			sum += pe
		}
		n := 0 // entries of the list so far
		for e, pe := range p {
			if !(pe >= 0) || (n == k && pe <= topP[k-1]) {
				continue // NaN (non-finite logits), or not in the top k
			}
			// After every entry at least as likely: equal ones stay in id order.
			at := n
			for at > 0 && topP[at-1] < pe {
				at--
			}
			if n < k {
				n++
			}
			copy(topP[at+1:n], topP[at:n-1])
			copy(topE[at+1:n], topE[at:n-1])
			topP[at], topE[at] = pe, int32(e)
		}
		if n < k {
			return t
		}
		var picked float32
		for j := 0; j < k; j++ {
			ids[t*k+j] = topE[j]
			weights[t*k+j] = topP[j] / sum
			picked += topP[j] / sum
		}
		for j := 0; j < k; j++ {
			weights[t*k+j] /= picked
		}
	}
	return -1
}

func inferExpertMatmul(v *graph.Value, wTypes []graph.DType) (graph.Type, error) {
	if err := wantArgs(v, 3); err != nil {
		return graph.Type{}, err
	}
	x, err := wantDType(v, 0, "x", graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := wantRank(v, 1, "w", 3, wTypes...)
	if err != nil {
		return graph.Type{}, err
	}
	ids, err := wantRank(v, 2, "ids", 2, graph.I32)
	if err != nil {
		return graph.Type{}, err
	}
	T, k := ids.Shape[0], ids.Shape[1]
	switch len(x.Shape) {
	case 2:
		if err := sameDim("tokens (x vs ids)", x.Shape[0], T); err != nil {
			return graph.Type{}, err
		}
	case 3:
		if err := sameDim("tokens (x vs ids)", x.Shape[0], T); err != nil {
			return graph.Type{}, err
		}
		if err := sameDim("experts per token (x vs ids)", x.Shape[1], k); err != nil {
			return graph.Type{}, err
		}
	default:
		return graph.Type{}, fmt.Errorf("%s has shape %s, want [T,K] or [T,k,K]", argName(0, "x"), x.Shape)
	}
	if err := sameDim("inner dimension (x last vs w last)", last(x.Shape), w.Shape[2]); err != nil {
		return graph.Type{}, err
	}
	return f32(T, k, w.Shape[1]), nil
}

// costExpertMatmul counts the weight bytes of min(T·k, E) experts: each routed row touches
// one expert, and there are only E of them.
func costExpertMatmul(v *graph.Value, b graph.Bindings) Cost {
	x, w, ids := arg(v, 0), arg(v, 1), arg(v, 2)
	E, M, K := int64(w.Shape[0].Eval(b)), int64(w.Shape[1].Eval(b)), int64(w.Shape[2].Eval(b))
	routed := elemsOf(ids, b)
	experts := min(routed, E)
	return Cost{
		BytesRead:    x.Bytes(b) + ids.Bytes(b) + experts*bytesOfElems(w, M*K),
		BytesWritten: v.Type.Bytes(b),
		Flops:        2 * routed * M * K,
	}
}

// parallelExpertRuns runs the work of a routed-expert matmul, the blocks of
// expertRowBlock weight rows [blkLo, blkHi) of the i-th expert routedRows found (its rows
// rowsOf[i]), as fn(worker, i, blkLo, blkHi). When every used expert has one routed row (a
// decode step) the blocks are of one size and each worker takes one contiguous run of
// them (parallelChunks over all experts' blocks in order), passed to fn an expert at a
// time: each worker streams whole stretches of the experts' matrices from one end to the
// other, which the hardware and the row kernel's prefetches follow. Otherwise (the
// experts' row counts differ) the blocks are handed out one at a time (parallelItems).
// Either way every weight row meets the same activations in the same kernel, so the sums
// are the same to the bit.
func parallelExpertRuns(env *Env, rowsOf [][]int, blocks int, fn func(worker, i, blkLo, blkHi int)) {
	if decodeRegions.Load() {
		one := true
		for _, rows := range rowsOf {
			if len(rows) != 1 {
				one = false
				break
			}
		}
		if one {
			parallelBalanced(env, len(rowsOf)*blocks, func(worker, lo, hi int) {
				for it := lo; it < hi; {
					i := it / blocks
					end := min(hi, (i+1)*blocks)
					fn(worker, i, it-i*blocks, end-i*blocks)
					it = end
				}
			})
			return
		}
	}
	parallelItems(env, len(rowsOf)*blocks, func(worker, item int) {
		fn(worker, item/blocks, item%blocks, item%blocks+1)
	})
}

// expertRowBlock is the number of weight rows one work item of expert_matmul covers.
const expertRowBlock = 64

// routedRows groups the routed rows (t·k + j for ids[t·k+j]) by expert, so that each
// expert's weights are read once per call: the experts used, in order of first use, and
// rowsOf[i] the rows of expert used[i], in order. An id outside [0, E) is an error naming
// op. Two passes over the ids and no allocation that grows with E (the expert-to-slot
// table is pooled): a decode step calls it twice per layer with eight ids of 256 experts,
// where a fresh table of every expert's rows cost more than the grouping.
func routedRows(op string, ids []int32, k, E int) (rowsOf [][]int, used []int, err error) {
	// slots[e] is 1 + e's index in used (0: not yet seen); counts is each used expert's rows.
	slot := routedSlotsPool.Get().(*[]int32)
	defer routedSlotsPool.Put(slot)
	if cap(*slot) < E {
		*slot = make([]int32, E)
	}
	slots := (*slot)[:E]
	var counts []int
	for r, id := range ids {
		if id < 0 || int(id) >= E {
			clear(slots)
			return nil, nil, fmt.Errorf("%s: expert id %d at (%d, %d) is outside [0, %d)", op, id, r/k, r%k, E)
		}
		if slots[id] == 0 {
			used = append(used, int(id))
			counts = append(counts, 0)
			slots[id] = int32(len(used))
		}
		counts[slots[id]-1]++
	}
	flat := make([]int, len(ids))
	rowsOf = make([][]int, len(used))
	at := 0
	for i, c := range counts {
		rowsOf[i] = flat[at : at : at+c]
		at += c
	}
	for r, id := range ids {
		i := slots[id] - 1
		rowsOf[i] = append(rowsOf[i], r)
	}
	for _, e := range used {
		slots[e] = 0 // the pooled table goes back all zero
	}
	return rowsOf, used, nil
}

// routedSlotsPool holds routedRows' expert-to-slot tables, all zero between calls.
var routedSlotsPool = sync.Pool{New: func() any { return new([]int32) }}

func refExpertMatmul(env *Env, v *graph.Value, in, out []*Tensor) error {
	x, wt, idt := in[0], in[1], in[2]
	w, err := newWeightRows(wt)
	if err != nil {
		return fmt.Errorf("%s weight: %w", v.Op, err)
	}
	E, M, K := wt.Shape[0], wt.Shape[1], wt.Shape[2]
	T, k := idt.Shape[0], idt.Shape[1]
	perToken := len(x.Shape) == 2
	xs, ids, y := x.F32(), idt.I32(), out[0].F32()

	rowsOf, used, err := routedRows(v.Op, ids[:T*k], k, E)
	if err != nil {
		return err
	}
	w = w.forEnv(env)
	fast := w.t.DType.Quantized() && !w.reference
	type expertWork struct {
		x     []float32 // gathered activation rows
		xsums [][]float32
		acts  *quantActs // the rows prepared for the fast kernels
	}
	// Gathering and preparing the rows is a pass over all routed activations: split it
	// over the experts too (it is most of a prefill chunk's non-kernel time).
	work := make([]expertWork, len(used))
	var quantized *int8Source // every source row quantized once, when the int8 kernels run
	if fast && int8Fits(env, w, 2) {
		sources := T * k
		if perToken {
			sources = T
		}
		quantized = newInt8Source(env, w, sources, func(s int) []float32 { return xs[s*K : (s+1)*K] })
	}
	// A decode token's one row meets every expert it was routed to: where the int8 source
	// does not already hold it, it is prepared once (interleaved, or quantized to int16)
	// and read by all of them (released once, below).
	var shared *quantActs
	if fast && perToken && T == 1 && quantized == nil {
		shared = prepareActsFrom(env, w, 1, func(int) []float32 { return xs[:K] })
	}
	parallelItems(env, len(used), func(_, i int) {
		rows := rowsOf[i]
		if shared != nil {
			work[i] = expertWork{acts: shared}
			return
		}
		if quantized != nil && (len(rows) > 1 || int8Fits(env, w, 1)) {
			work[i] = expertWork{acts: quantized.gather(w, len(rows), func(p int) int {
				if perToken {
					return rows[p] / k
				}
				return rows[p]
			})}
			return
		}
		if fast {
			work[i] = expertWork{acts: prepareActsFrom(env.serial(), w, len(rows), func(p int) []float32 {
				src := rows[p]
				if perToken {
					src /= k
				}
				return xs[src*K : (src+1)*K]
			})}
			return
		}
		gx := make([]float32, len(rows)*K)
		for p, r := range rows {
			src := r
			if perToken {
				src = r / k
			}
			copy(gx[p*K:(p+1)*K], xs[src*K:(src+1)*K])
		}
		work[i] = expertWork{x: gx, xsums: quantGroupSums(w, gx, len(rows))}
	})
	int8Rows := quantized != nil
	quantized.release() // gathered: every expert's rows are in its own acts
	rowBlock := expertItemRows(T, int8Rows)
	blocks := (M + rowBlock - 1) / rowBlock
	scratch := make([][]float32, env.workers())
	parallelExpertRuns(env, rowsOf, blocks, func(worker, i, blkLo, blkHi int) {
		e, wk, rows := used[i], work[i], rowsOf[i]
		lo, hi := blkLo*rowBlock, min(blkHi*rowBlock, M)
		dst := func(p int) []float32 { return y[rows[p]*M : (rows[p]+1)*M] }
		if fast && len(rows) == 1 {
			mulQuantRow(wk.acts, w, e*M, lo, hi, y[rows[0]*M+lo:rows[0]*M+hi])
			return
		}
		if fast {
			mulQuant(wk.acts, w, e*M, lo, hi, dst)
			return
		}
		if scratch[worker] == nil {
			scratch[worker] = newRowScratch(w, nil)
		}
		mulBlock(wk.x, len(rows), wk.xsums, w, e*M, lo, hi, scratch[worker], dst)
	})
	if shared != nil {
		shared.release()
		return nil
	}
	for _, wk := range work {
		if wk.acts != nil {
			wk.acts.release()
		}
	}
	return nil
}

func inferMoECombine(v *graph.Value) (graph.Type, error) {
	if err := wantArgs(v, 2); err != nil {
		return graph.Type{}, err
	}
	y, err := wantRank(v, 0, "y", 3, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	w, err := wantRank(v, 1, "w", 2, graph.F32)
	if err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("tokens (y vs w)", y.Shape[0], w.Shape[0]); err != nil {
		return graph.Type{}, err
	}
	if err := sameDim("experts per token (y vs w)", y.Shape[1], w.Shape[1]); err != nil {
		return graph.Type{}, err
	}
	return f32(y.Shape[0], y.Shape[2]), nil
}

// refMoECombine sums each token's k expert outputs by their weights; a prefill step's
// tokens in parallel (routerParallelFrom), each token's sum in slot order either way.
func refMoECombine(env *Env, v *graph.Value, in, out []*Tensor) error {
	T, k, H := in[0].Shape[0], in[0].Shape[1], in[0].Shape[2]
	ys, ws, o := in[0].F32(), in[1].F32(), out[0].F32()
	if T < routerParallelFrom {
		env = env.serial()
	}
	parallelRange(env, T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			or := o[t*H : (t+1)*H]
			clear(or)
			for j := 0; j < k; j++ {
				axpy(ws[t*k+j], ys[(t*k+j)*H:(t*k+j+1)*H], or)
			}
		}
	})
	return nil
}
