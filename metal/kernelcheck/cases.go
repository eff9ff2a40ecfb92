package kernelcheck

import (
	"fmt"
	"math"
	"math/rand/v2"

	"pistil/gpu"
	"pistil/graph"
	"pistil/internal/randtensor"
	"pistil/ops"
	"pistil/ops/kernels"
)

// Launch builders, one per kernel shape (grids and group sizes as the kernels expect).

func matmulArgs(e *env, x, w, y operand) kernels.MatmulArgs {
	M, K := w.shape[len(w.shape)-2], w.shape[len(w.shape)-1]
	return kernels.MatmulArgs{W: w.w, X: x.addr, Y: y.addr, Rows: int32(prod(x.shape) / K), M: int32(M), K: int32(K)}
}

func matmulRows(e *env) []Launch {
	a := matmulArgs(e, e.in[0], e.in[1], e.out[0])
	return []Launch{{kernels.KernelMatmulRows, [3]int{ceilDiv(int(a.M), 8), 1, 1}, 256, a}}
}

func matmulTiled(e *env) []Launch {
	a := matmulArgs(e, e.in[0], e.in[1], e.out[0])
	return []Launch{{kernels.KernelMatmulTiled, [3]int{ceilDiv(int(a.M), kernels.TileM), ceilDiv(int(a.Rows), kernels.TileN), 1}, 256, a}}
}

func matvecQ4Rows(e *env) []Launch {
	a := matmulArgs(e, e.in[0], e.in[1], e.out[0])
	return []Launch{{kernels.KernelMatvecQ4Rows, [3]int{ceilDiv(int(a.M), kernels.MatvecRowsPerGroup(int(a.K))), ceilDiv(int(a.Rows), kernels.MatvecBatchRows), 1}, kernels.MatvecThreads, a}}
}

func expertArgs(x, w, idsOp, y operand) kernels.ExpertArgs {
	a := kernels.ExpertArgs{W: w.w, X: x.addr, Ids: idsOp.addr, Y: y.addr, T: int32(idsOp.shape[0]), TopK: int32(idsOp.shape[1]),
		E: int32(w.shape[0]), M: int32(w.shape[1]), K: int32(w.shape[2])}
	if len(x.shape) == 3 {
		a.XPerSlot = 1
	}
	return a
}

func expertLaunch(kernel string) func(e *env) []Launch {
	return func(e *env) []Launch {
		a := expertArgs(e.in[0], e.in[1], e.in[2], e.out[0])
		slots := int(a.T * a.TopK)
		switch kernel {
		case kernels.KernelExpertRows:
			return []Launch{{kernel, [3]int{ceilDiv(int(a.M), 8), slots, 1}, 256, a}}
		case kernels.KernelExpertTiled:
			return []Launch{{kernel, [3]int{ceilDiv(int(a.M), kernels.ExpertTileM), int(a.E), 1}, 256, a}}
		case kernels.KernelExpertMVGatherQ4:
			return []Launch{{kernel, [3]int{ceilDiv(int(a.M), kernels.MatvecRowsPerGroup(int(a.K))), int(a.E), 1}, kernels.MatvecThreads, a}}
		}
		return []Launch{{kernel, [3]int{ceilDiv(int(a.M), kernels.MatvecRowsPerGroup(int(a.K))), slots, 1}, kernels.MatvecThreads, a}}
	}
}

func unaryLaunch(op int32) func(e *env) []Launch {
	return func(e *env) []Launch {
		n := prod(e.out[0].shape)
		return []Launch{{kernels.KernelUnary, elementGrid(n), 256, kernels.UnaryArgs{X: e.in[0].addr, Y: e.out[0].addr, N: int32(n), Op: op, XDType: e.in[0].w.DType}}}
	}
}

func binaryLaunch(op int32) func(e *env) []Launch {
	return func(e *env) []Launch {
		a, b := e.in[0], e.in[1]
		args := kernels.BinaryArgs{A: a.addr, B: b.addr, Y: e.out[0].addr, N: int32(prod(a.shape)), Op: op, ADType: a.w.DType, BDType: b.w.DType}
		off := kernels.MaxRank - len(a.shape)
		for i := range args.Shape {
			args.Shape[i] = 1
		}
		for i, d := range a.shape {
			args.Shape[off+i] = int32(d)
		}
		bOff, s := len(a.shape)-len(b.shape), 1
		for i := len(b.shape) - 1; i >= 0; i-- {
			if b.shape[i] == a.shape[bOff+i] {
				args.BStride[off+bOff+i] = int32(s)
			}
			s *= b.shape[i]
		}
		return []Launch{{kernels.KernelBinary, elementGrid(prod(a.shape)), 256, args}}
	}
}

func attentionArgs(e *env, scale float32, splits int32) kernels.AttentionArgs {
	q, k := e.in[0], e.in[1]
	return kernels.AttentionArgs{Q: q.addr, K: k.addr, V: e.in[2].addr, O: e.out[0].addr, Steps: e.steps, T: int32(q.shape[0]),
		NH: int32(q.shape[1]), KVH: int32(k.shape[1]), D: int32(q.shape[2]), CacheDType: k.w.DType, Scale: scale, Splits: splits}
}

func attentionGQA(scale float32, splits int32) func(e *env) []Launch {
	return func(e *env) []Launch {
		a := attentionArgs(e, scale, splits)
		return []Launch{{kernels.KernelAttentionGQA, [3]int{int(a.KVH), int(a.T), int(splits)}, 256, a}}
	}
}

func matvecFused(e *env, a kernels.MatvecArgs, maxM, ys int) []Launch {
	return []Launch{{kernels.KernelMatvecFusedQ4, [3]int{ceilDiv(maxM, kernels.MatvecRowsPerGroup(int(a.K))), ys, 1}, kernels.MatvecThreads, a}}
}

func q4w(w operand) kernels.Weight { return w.w }

// partials is attention_partial output for attention_merge: per range a max, a positive
// sum and an output row; the last range of each row empty (max -inf, nothing summed).
func partials(r *rand.Rand, T, NH, S, D int) *ops.Tensor {
	t := randtensor.F32(r, T, NH, S, D+2)
	p := t.F32()
	for row := 0; row < T*NH; row++ {
		for s := 0; s < S; s++ {
			e := p[(row*S+s)*(D+2):][:D+2]
			e[1] = 1 + float32(r.Float64())*5
			if s == S-1 {
				e[0], e[1] = float32(math.Inf(-1)), 0
				for i := range e[2:] {
					e[2+i] = 0
				}
			}
		}
	}
	return t
}

// Cases is every check, over every kernel of kernels.Names (the same inputs each call).
func Cases() []Case {
	r := rand.New(rand.NewPCG(1, 2))
	const hidden, headD, vocab = 192, 64, 512
	cache := func(dt graph.DType, rows, kvh, d int) *ops.Tensor {
		if dt == graph.BF16 {
			return randtensor.BF16(r, rows, kvh, d)
		}
		return randtensor.F32(r, rows, kvh, d)
	}
	embed := func(e *env) []Launch {
		tab, id := e.in[0], e.in[1]
		T := prod(id.shape)
		return []Launch{{kernels.KernelEmbed, [3]int{T, 1, 1}, rowBlock(tab.shape[1]), kernels.EmbedArgs{
			W: tab.w, Ids: id.addr, Out: e.out[0].addr, T: int32(T), Cols: int32(tab.shape[1]), Vocab: int32(tab.shape[0])}}}
	}
	rmsNorm := func(e *env) []Launch {
		x, w := e.in[0], e.in[1]
		D := x.shape[len(x.shape)-1]
		rows := prod(x.shape) / D
		a := kernels.RMSNormArgs{X: x.addr, Y: e.out[0].addr, W: w.w, Rows: int32(rows), D: int32(D), Eps: 1e-6}
		return []Launch{{kernels.KernelRMSNorm, [3]int{rows, 1, 1}, rowBlock(D), a}}
	}
	rope := func(norm bool) func(e *env) []Launch {
		return func(e *env) []Launch {
			x := e.in[0]
			T, heads, D := x.shape[0], x.shape[1], x.shape[2]
			a := kernels.RoPEArgs{X: x.addr, Y: e.out[0].addr, Steps: e.steps, T: int32(T), Heads: int32(heads), D: int32(D), Dims: 16, Theta: 1e7, XRow: int32(D)}
			if norm {
				a.W, a.Eps, a.Norm = e.in[1].w, 1e-6, 1
			}
			return []Launch{{kernels.KernelRoPE, [3]int{T * heads, 1, 1}, rowBlock(max(8, D-16)), a}}
		}
	}
	kvAppend := func(e *env) []Launch {
		c, x := e.in[0], e.in[1]
		T, row := x.shape[0], c.shape[1]*c.shape[2]
		return []Launch{{kernels.KernelKVAppend, elementGrid(T * row), 256, kernels.KVAppendArgs{
			Cache: c.addr, X: x.addr, Steps: e.steps, T: int32(T), Row: int32(row), CacheDType: c.w.DType}}}
	}
	conv := func(silu int32) func(e *env) []Launch {
		return func(e *env) []Launch {
			x, st, w := e.in[0], e.in[1], e.in[2]
			T, Ch, K := x.shape[0], x.shape[1], w.shape[1]
			groups, threads, slices := kernels.Conv1DGeometry(T, Ch)
			return []Launch{{kernels.KernelConv1D, [3]int{groups, 1, 1}, threads, kernels.Conv1DArgs{
				X: x.addr, State: st.addr, Y: e.out[0].addr, W: w.w, T: int32(T), Ch: int32(Ch), K: int32(K), StateDType: st.w.DType, SiLU: silu, Slices: slices}}}
		}
	}
	gatedDelta := func(e *env) []Launch {
		q, v := e.in[0], e.in[2]
		T, Hk, Dk, Hv, Dv := q.shape[0], q.shape[1], q.shape[2], v.shape[1], v.shape[2]
		return []Launch{{kernels.KernelGatedDelta, [3]int{ceilDiv(Dv, 32/kernels.DeltaLanes), Hv, 1}, 32, kernels.GatedDeltaArgs{
			Q: q.addr, K: e.in[1].addr, V: v.addr, G: e.in[3].addr, Beta: e.in[4].addr, S: e.in[5].addr, O: e.out[0].addr,
			T: int32(T), Hk: int32(Hk), Hv: int32(Hv), Dk: int32(Dk), Dv: int32(Dv)}}}
	}
	router := func(e *env) []Launch {
		x := e.in[0]
		T, E := x.shape[0], x.shape[1]
		k := e.out[0].shape[1]
		return []Launch{{kernels.KernelRouter, [3]int{ceilDiv(T, 4), 1, 1}, 128, kernels.RouterArgs{
			Logits: x.addr, Weights: e.out[0].addr, Ids: e.out[1].addr, T: int32(T), E: int32(E), K: int32(k)}}}
	}
	argmax := func(e *env) []Launch {
		x := e.in[0]
		V := x.shape[len(x.shape)-1]
		T := prod(x.shape) / V
		return []Launch{{kernels.KernelArgmax, [3]int{T, 1, 1}, 256, kernels.ArgmaxArgs{X: x.addr, Out: e.out[0].addr, T: int32(T), V: int32(V)}}}
	}
	// The sample kernel where its rule is the argmax: greedy, top-k 1 and a nucleus of one
	// token (the sampling paths' radix select, sort and Gumbel-max all run).
	sample := func(p kernels.SampleArgs) func(e *env) []Launch {
		return func(e *env) []Launch {
			x := e.in[0]
			p.Logits, p.Out, p.V = x.addr, e.out[0].addr, int32(x.shape[len(x.shape)-1])
			p.In, p.Step = e.work(4), e.work(4)
			return []Launch{{kernels.KernelSample, [3]int{1, 1, 1}, kernels.SampleThreads, p}}
		}
	}
	l2 := func(e *env) []Launch {
		x := e.in[0]
		D := x.shape[len(x.shape)-1]
		rows := prod(x.shape) / D
		return []Launch{{kernels.KernelL2Norm, [3]int{rows, 1, 1}, rowBlock(D), kernels.L2NormArgs{X: x.addr, Y: e.out[0].addr, Rows: int32(rows), D: int32(D),
			Eps: 1e-6, Scale: 0.25, RowsPerOuter: 1, OuterStride: int32(D)}}}
	}
	// The decode tie case: row 0 has its maximum at 17 and 300, row 1 everywhere.
	argTies := tied(r, 3, vocab)
	argTies.F32()[17], argTies.F32()[300] = 9, 9
	for i := vocab; i < 2*vocab; i++ {
		argTies.F32()[i] = 1
	}
	return append([]Case{
		{name: "embed q4", op: "embed", in: []*ops.Tensor{randtensor.Quant(r, graph.Q4, vocab, hidden), randtensor.IDs([]int32{3, 511, 0}, 3)}, launch: embed},
		{name: "embed bf16", op: "embed", in: []*ops.Tensor{randtensor.BF16(r, 50, 96), randtensor.IDs([]int32{7, 1}, 2)}, launch: embed},
		{name: "dequant q4", op: "dequant", in: []*ops.Tensor{randtensor.Quant(r, graph.Q4, 3, 5, 128)}, launch: func(e *env) []Launch {
			w := e.in[0]
			cols := w.shape[len(w.shape)-1]
			rows := prod(w.shape) / cols
			return []Launch{{kernels.KernelDequant, elementGrid(rows * cols), 256, kernels.DequantArgs{W: w.w, Out: e.out[0].addr, Rows: int32(rows), Cols: int32(cols)}}}
		}},
		{name: "matmul_rows bf16 3 rows", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 3, 64), randtensor.BF16(r, 40, 64)}, launch: matmulRows},
		{name: "matmul_rows q8 decode", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 128), randtensor.Quant(r, graph.Q8, 9, 128)}, launch: matmulRows},
		{name: "matvec_q8 odd M", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q8, 37, hidden)}},   // gpu.Metal: matvec_q8
		{name: "matvec_q8 one long row", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, 4096), randtensor.Quant(r, graph.Q8, 1, 4096)}}, // gpu.Metal: matvec_q8
		// The router reading its norm (norm-matvec): the sum, the normed row and the logits
		// (gpu: matvec_q8_norm), with a bf16 and an f32 norm weight.
		{name: "matvec_q8_norm odd M", op: "add_rms_norm_matmuls", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 1, hidden),
			randtensor.F32(r, 1, hidden), randtensor.BF16(r, hidden), randtensor.Quant(r, graph.Q8, 37, hidden)}},
		{name: "matvec_q8_norm K 2048, f32 norm weight", op: "add_rms_norm_matmuls", attrs: graph.Attrs{"eps": 1e-5}, in: []*ops.Tensor{randtensor.F32(r, 1, 2048),
			randtensor.F32(r, 1, 2048), randtensor.F32(r, 2048), randtensor.Quant(r, graph.Q8, 64, 2048)}},
		{name: "matvec_q4 odd M", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 37, hidden)}}, // gpu.Metal: matvec_q4
		{name: "matmul_tiled q4", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 70, hidden), randtensor.Quant(r, graph.Q4, 72, hidden)}, launch: matmulTiled},
		{name: "matmul_tiled f32", op: "matmul", in: []*ops.Tensor{randtensor.F32(r, 9, 64), randtensor.F32(r, 24, 64)}, launch: matmulTiled},
		{name: "expert_rows bf16 per-slot x", op: "expert_matmul", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 64), randtensor.BF16(r, 8, 40, 64), randtensor.Routed(r, 2, 4, 8)},
			launch: expertLaunch(kernels.KernelExpertRows)},
		{name: "expert_matvec_q4 decode", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Routed(r, 1, 4, 16)}}, // gpu.Metal: expert_matvec_q4
		{name: "expert_tiled q4 prefill", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 20, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Routed(r, 20, 4, 16)},
			launch: expertLaunch(kernels.KernelExpertTiled)},
		{name: "matvec_q4_rows prefill", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 21, hidden), randtensor.Quant(r, graph.Q4, 40, hidden)}, launch: matvecQ4Rows},
		{name: "matvec_q4_rows K 2048", op: "qmatmul", in: []*ops.Tensor{randtensor.F32(r, 10, 2048), randtensor.Quant(r, graph.Q4, 20, 2048)}, launch: matvecQ4Rows},
		{name: "expert_matvec_gather_q4 prefill", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 20, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Routed(r, 20, 4, 16)},
			launch: expertLaunch(kernels.KernelExpertMVGatherQ4)},
		// More slots than a Metal group gathers at a time (EXPERT_SLOTS 2048): rounds.
		{name: "expert_matvec_gather_q4 in rounds", op: "expert_qmatmul", in: []*ops.Tensor{randtensor.F32(r, 600, 64), randtensor.Quant(r, graph.Q4, 4, 12, 64), randtensor.Routed(r, 600, 4, 4)},
			launch: expertLaunch(kernels.KernelExpertMVGatherQ4)},
		{name: "expert_matvec_swiglu_q4", op: "expert_matmul_swiglu",
			in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Routed(r, 1, 4, 16)},
			launch: func(e *env) []Launch {
				a := expertArgs(e.in[0], e.in[1], e.in[3], e.out[0])
				a.W2 = e.in[2].w
				return []Launch{{kernels.KernelExpertMVSwiGLUQ4, [3]int{ceilDiv(int(a.M), kernels.MatvecRowsPerGroup(int(a.K))), int(a.T * a.TopK), 1}, kernels.MatvecThreads, a}}
			}},
		{name: "expert_matvec_combine_q4", op: "expert_matmul_combine",
			in: []*ops.Tensor{randtensor.F32(r, 1, 4, 64), randtensor.Quant(r, graph.Q4, 16, hidden, 64), randtensor.Routed(r, 1, 4, 16), randtensor.F32(r, 1, 4)},
			launch: func(e *env) []Launch {
				a := expertArgs(e.in[0], e.in[1], e.in[2], e.out[0])
				a.Weights = e.in[3].addr
				return []Launch{{kernels.KernelExpertMVCombineQ4, [3]int{ceilDiv(int(a.M), int(kernels.Metal.CombineRows)), int(a.T), 1}, kernels.MatvecThreads, a}}
			}},
		// The shared expert as one more slot (fuse-shared-expert), through gpu.Metal's
		// lowering: narrower than the routed experts, and (combine) more (expert, chunk)
		// pairs than 128 threads.
		{name: "expert_matvec_swiglu_shared_q4", op: "expert_matmul_swiglu_shared",
			in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Quant(r, graph.Q4, 16, 64, hidden), randtensor.Routed(r, 1, 4, 16),
				randtensor.Quant(r, graph.Q4, 40, hidden), randtensor.Quant(r, graph.Q4, 40, hidden)}},
		{name: "expert_matvec_combine_shared_q4", op: "expert_matmul_combine_shared",
			in: []*ops.Tensor{randtensor.F32(r, 1, 8, 512), randtensor.Quant(r, graph.Q4, 16, hidden, 512), randtensor.Routed(r, 1, 8, 16), randtensor.F32(r, 1, 8),
				randtensor.F32(r, 1, 512), randtensor.Quant(r, graph.Q4, hidden, 512), randtensor.F32(r, 1, 1)}},
		{name: "expert_matvec_swiglu_routed_q4", op: "expert_route_swiglu_shared", attrs: graph.Attrs{"k": 8},
			in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.F32(r, 1, 256), randtensor.Quant(r, graph.Q4, 256, 8, hidden), randtensor.Quant(r, graph.Q4, 256, 8, hidden),
				randtensor.Quant(r, graph.Q4, 40, hidden), randtensor.Quant(r, graph.Q4, 40, hidden), randtensor.Quant(r, graph.Q8, 1, hidden)}},
		{name: "matvec_fused_q4 matmuls (q/k/v)", op: "matmuls",
			in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 40, hidden), randtensor.Quant(r, graph.Q4, 24, hidden), randtensor.Quant(r, graph.Q4, 72, hidden)},
			launch: func(e *env) []Launch {
				a := kernels.MatvecArgs{X: e.in[0].addr, K: hidden, Mode: kernels.MatvecSeparate}
				for i := 0; i < 3; i++ {
					a.W[i], a.Y[i], a.M[i] = q4w(e.in[1+i]), e.out[i].addr, int32(e.in[1+i].shape[0])
				}
				return matvecFused(e, a, 72, 3)
			}},
		{name: "matvec_fused_q4 swiglu", op: "matmul_swiglu",
			in: []*ops.Tensor{randtensor.F32(r, 1, hidden), randtensor.Quant(r, graph.Q4, 64, hidden), randtensor.Quant(r, graph.Q4, 64, hidden)},
			launch: func(e *env) []Launch {
				return matvecFused(e, kernels.MatvecArgs{W: [4]kernels.Weight{e.in[1].w, e.in[2].w}, Y: [4]uint64{e.out[0].addr}, M: [4]int32{64, 64},
					X: e.in[0].addr, K: hidden, Mode: kernels.MatvecSwiGLU}, 64, 1)
			}},
		{name: "matvec_fused_q4 gated add", op: "matmul_gated_add",
			in: []*ops.Tensor{randtensor.F32(r, 1, 64), randtensor.Quant(r, graph.Q4, hidden, 64), randtensor.F32(r, 1, 1), randtensor.F32(r, 1, hidden)},
			launch: func(e *env) []Launch {
				return matvecFused(e, kernels.MatvecArgs{W: [4]kernels.Weight{e.in[1].w}, Y: [4]uint64{e.out[0].addr}, M: [4]int32{hidden},
					X: e.in[0].addr, K: 64, RowGate: e.in[2].addr, Other: e.in[3].addr}, hidden, 1)
			}},
		{name: "matvec_fused_q4 sigmoid gate", op: "sigmoid_gate_matmul",
			in: []*ops.Tensor{randtensor.F32(r, 1, 512), randtensor.F32(r, 1, 512), randtensor.Quant(r, graph.Q4, hidden, 512)},
			launch: func(e *env) []Launch {
				return matvecFused(e, kernels.MatvecArgs{W: [4]kernels.Weight{e.in[2].w}, Y: [4]uint64{e.out[0].addr}, M: [4]int32{hidden},
					X: e.in[0].addr, XGate: e.in[1].addr, K: 512}, hidden, 1)
			}},
		{name: "rms_norm bf16 w", op: "rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 3, hidden), randtensor.BF16(r, hidden)}, launch: rmsNorm},
		{name: "rms_norm D 300", op: "rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 2, 300), randtensor.F32(r, 300)}, launch: rmsNorm},
		{name: "add_rms_norm", op: "add_rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 3, hidden), randtensor.F32(r, 3, hidden), randtensor.BF16(r, hidden)},
			launch: func(e *env) []Launch {
				a := kernels.RMSNormArgs{X: e.in[0].addr, B: e.in[1].addr, S: e.out[0].addr, Y: e.out[1].addr, W: e.in[2].w, Rows: 3, D: hidden, Eps: 1e-6}
				return []Launch{{kernels.KernelRMSNorm, [3]int{3, 1, 1}, rowBlock(hidden), a}}
			}},
		{name: "l2_norm", op: "l2_norm", attrs: graph.Attrs{"eps": 1e-6, "scale": 0.25}, in: []*ops.Tensor{randtensor.F32(r, 2, 3, 32)}, launch: l2},
		{name: "slice_l2_norm in place", op: "slice_l2_norm", attrs: graph.Attrs{"axis": 1, "start": 64, "end": 128, "shape": "[3,2,32]", "eps": 1e-6, "scale": 0.5},
			in: []*ops.Tensor{randtensor.F32(r, 3, 384)}, launch: func(e *env) []Launch {
				return []Launch{{kernels.KernelL2Norm, [3]int{6, 1, 1}, 32, kernels.L2NormArgs{X: e.in[0].addr, Y: e.out[0].addr, Rows: 6, D: 32,
					Eps: 1e-6, Scale: 0.5, RowsPerOuter: 2, OuterStride: 384, Start: 64}}}
			}},
		{name: "gated_rms_norm", op: "gated_rms_norm", attrs: graph.Attrs{"eps": 1e-6}, in: []*ops.Tensor{randtensor.F32(r, 2, 4, 64), randtensor.F32(r, 2, 4, 64), randtensor.BF16(r, 64)},
			launch: func(e *env) []Launch {
				return []Launch{{kernels.KernelGatedRMSNorm, [3]int{8, 1, 1}, 64, kernels.GatedRMSNormArgs{X: e.in[0].addr, Z: e.in[1].addr, Y: e.out[0].addr,
					W: e.in[2].w, Rows: 8, D: 64, Eps: 1e-6}}}
			}},
		{name: "gdn_gates", op: "gdn_gates", in: []*ops.Tensor{randtensor.F32(r, 3, 4), randtensor.F32(r, 3, 4), randtensor.F32(r, 4), randtensor.BF16(r, 4)},
			launch: func(e *env) []Launch {
				return []Launch{{kernels.KernelGDNGates, elementGrid(12), 256, kernels.GDNGatesArgs{A: e.in[0].addr, B: e.in[1].addr, G: e.out[0].addr,
					Beta: e.out[1].addr, ALog: e.in[2].w, DtBias: e.in[3].w, T: 3, Hv: 4}}}
			}},
		{name: "softplus (log1p)", op: "softplus", in: []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 2, 33), 8)}, launch: unaryLaunch(kernels.UnarySoftplus)},
		{name: "silu", op: "silu", in: []*ops.Tensor{randtensor.F32(r, 2, 33)}, launch: unaryLaunch(kernels.UnarySiLU)},
		{name: "sigmoid", op: "sigmoid", in: []*ops.Tensor{randtensor.F32(r, 2, 33)}, launch: unaryLaunch(kernels.UnarySigmoid)},
		{name: "exp", op: "exp", in: []*ops.Tensor{randtensor.F32(r, 7)}, launch: unaryLaunch(kernels.UnaryExp)},
		{name: "neg", op: "neg", in: []*ops.Tensor{randtensor.F32(r, 300)}, launch: unaryLaunch(kernels.UnaryNeg)},
		{name: "add suffix bf16", op: "add", in: []*ops.Tensor{randtensor.F32(r, 3, 4), randtensor.BF16(r, 4)}, launch: binaryLaunch(kernels.BinaryAdd)},
		{name: "mul dims of 1", op: "mul", in: []*ops.Tensor{randtensor.F32(r, 3, 4, 5), randtensor.F32(r, 3, 1, 5)}, launch: binaryLaunch(kernels.BinaryMul)},
		{name: "swiglu", op: "swiglu", in: []*ops.Tensor{randtensor.F32(r, 2, 4, 8), randtensor.F32(r, 2, 4, 8)}, launch: binaryLaunch(kernels.BinarySwiGLU)},
		{name: "slice", op: "slice", attrs: graph.Attrs{"axis": 1, "start": 3, "end": 10}, in: []*ops.Tensor{randtensor.F32(r, 3, 12, 2)}, exact: true,
			launch: func(e *env) []Launch {
				return []Launch{{kernels.KernelSlice, elementGrid(42), 256, kernels.SliceArgs{X: e.in[0].addr, Y: e.out[0].addr, Outer: 3, N: 12, Start: 3, Len: 7, Inner: 2}}}
			}},
		{name: "rope", op: "rope", attrs: graph.Attrs{"dims": 16, "theta": 1e7}, in: []*ops.Tensor{randtensor.F32(r, 3, 8, headD)}, C: 11, launch: rope(false)},
		{name: "rms_norm_rope", op: "rms_norm_rope", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{randtensor.F32(r, 3, 8, headD), randtensor.BF16(r, headD)}, C: 300, launch: rope(true)},
		// gpu.Metal: rope reading the query heads in place from [query | gate] rows, and
		// writing the keys into cache rows C..C+T-1.
		{name: "slice_rms_norm_rope", op: "slice_rms_norm_rope", attrs: graph.Attrs{"axis": 2, "start": headD, "end": 2 * headD, "eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{randtensor.F32(r, 3, 8, 2*headD), randtensor.BF16(r, headD)}, C: 300},
		{name: "rms_norm_rope_append f32", op: "rms_norm_rope_append", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{cache(graph.F32, 16, 2, headD), randtensor.F32(r, 3, 2, headD), randtensor.BF16(r, headD)}, alias: map[int]int{0: 0}, C: 5},
		{name: "rms_norm_rope_append bf16", op: "rms_norm_rope_append", attrs: graph.Attrs{"eps": 1e-6, "dims": 16, "theta": 1e7},
			in: []*ops.Tensor{cache(graph.BF16, 16, 2, headD), randtensor.F32(r, 1, 2, headD), randtensor.BF16(r, headD)}, alias: map[int]int{0: 0}, C: 9},
		{name: "kv_append f32", op: "kv_append", in: []*ops.Tensor{cache(graph.F32, 16, 1, headD), randtensor.F32(r, 3, 1, headD)}, alias: map[int]int{0: 0}, C: 5, exact: true, launch: kvAppend},
		{name: "kv_append bf16 store", op: "kv_append", in: []*ops.Tensor{cache(graph.BF16, 16, 1, headD), randtensor.F32(r, 2, 1, headD)}, alias: map[int]int{0: 0}, C: 9, exact: true, launch: kvAppend},
		{name: "attention 16 heads per kv head", op: "attention", attrs: graph.Attrs{"scale": 0.1}, in: []*ops.Tensor{randtensor.F32(r, 2, 16, 32), randtensor.F32(r, 16, 1, 32), randtensor.F32(r, 16, 1, 32)}, C: 3,
			launch: func(e *env) []Launch {
				a := attentionArgs(e, 0.1, 1)
				return []Launch{{kernels.KernelAttention, [3]int{int(a.NH), int(a.T), 1}, 256, a}}
			}},
		{name: "attention_gqa prefill", op: "attention", attrs: graph.Attrs{"scale": 0.125},
			in: []*ops.Tensor{randtensor.F32(r, 3, 8, headD), cache(graph.F32, 16, 1, headD), cache(graph.F32, 16, 1, headD)}, C: 7, launch: attentionGQA(0.125, 1)},
		{name: "attention_gqa decode bf16 cache", op: "attention", attrs: graph.Attrs{"scale": 0.125},
			in: []*ops.Tensor{randtensor.F32(r, 1, 8, headD), cache(graph.BF16, 48, 1, headD), cache(graph.BF16, 48, 1, headD)}, C: 40, launch: attentionGQA(0.125, 1)},
		// Decode attention split over key ranges (the plan's split-attention), through the
		// shared GPU lowering: attention_gqa writes each range's partial state (8-key tiles
		// on Metal inside 16-key ranges), attention_merge combines them.
		{name: "attention_partial decode", op: "attention_partial", attrs: graph.Attrs{"scale": 0.125, "splits": 4, "key_block": kernels.AttnKeyBlock},
			in: []*ops.Tensor{randtensor.F32(r, 1, 8, headD), cache(graph.F32, 80, 1, headD), cache(graph.F32, 80, 1, headD)}, C: 70},
		{name: "attention_partial 2 tokens bf16", op: "attention_partial", attrs: graph.Attrs{"scale": 0.125, "splits": 3, "key_block": kernels.AttnKeyBlock},
			in: []*ops.Tensor{randtensor.F32(r, 2, 8, headD), cache(graph.BF16, 40, 1, headD), cache(graph.BF16, 40, 1, headD)}, C: 20},
		{name: "attention_merge", op: "attention_merge", in: []*ops.Tensor{partials(r, 2, 8, 5, headD)}},
		{name: "attention_gqa 2 kv heads D 256", op: "attention", attrs: graph.Attrs{"scale": 0.0625},
			in: []*ops.Tensor{randtensor.F32(r, 2, 4, 256), cache(graph.F32, 12, 2, 256), cache(graph.F32, 12, 2, 256)}, C: 9, launch: attentionGQA(0.0625, 1)},
		{name: "conv1d bf16 state", op: "conv1d", in: []*ops.Tensor{randtensor.F32(r, 1, 96), randtensor.BF16(r, 3, 96), randtensor.BF16(r, 96, 4)}, alias: map[int]int{1: 1}, launch: conv(0)},
		{name: "conv1d_silu", op: "conv1d_silu", in: []*ops.Tensor{randtensor.F32(r, 5, 384), randtensor.F32(r, 3, 384), randtensor.BF16(r, 384, 4)}, alias: map[int]int{1: 1}, launch: conv(1)},
		// Eight token slices of 2 (windows reaching back across slices into the state) and
		// channels not a multiple of a group's 32.
		{name: "conv1d 13 tokens in 8 slices", op: "conv1d", in: []*ops.Tensor{randtensor.F32(r, 13, 70), randtensor.F32(r, 3, 70), randtensor.BF16(r, 70, 4)}, alias: map[int]int{1: 1}, launch: conv(0)},
		{name: "gated_delta", op: "gated_delta", attrs: graph.Attrs{"form": "recurrent", "chunk": 64},
			in:    []*ops.Tensor{randtensor.Scaled(randtensor.F32(r, 3, 2, 32), 0.2), randtensor.Scaled(randtensor.F32(r, 3, 2, 32), 0.2), randtensor.F32(r, 3, 4, 64), randtensor.Scaled(randtensor.F32(r, 3, 4), 0.1), randtensor.F32(r, 3, 4), randtensor.F32(r, 4, 32, 64)},
			alias: map[int]int{1: 5}, launch: gatedDelta},
		// The fused GDN decode step (fuse-gdn-prologue) and the conv state's shift after it,
		// through gpu.Metal's lowering: GQA 2 and 1, bf16 and f32 conv state, Dv not a
		// multiple of the 4 columns a group takes.
		gdnStep(r, "gated_delta_step Hk 2 Hv 4 Dk 32 Dv 24 bf16 conv state", 2, 4, 32, 24, graph.BF16),
		gdnStep(r, "gated_delta_step Hk = Hv 3 Dk 64 Dv 7", 3, 3, 64, 7, graph.F32),
		// The conv with the q/k heads' L2 norms in its epilogue (fuse-conv-l2), through
		// gpu.Metal's lowering (one kernel for these decode shapes): heads of 64 from
		// mid-group, k before q, channels ending inside the last group, a bf16 state; heads
		// of 32, 3 taps; the model's shape.
		convL2(r, "conv1d_silu_l2 decode Ch 333, heads of 64 from mid-group, k before q, bf16 state", 333, 4, 2, 64, 192, 64, graph.BF16),
		convL2(r, "conv1d_silu_l2 decode Ch 200, heads of 32, 3 taps", 200, 3, 3, 32, 0, 96, graph.F32),
		convL2(r, "conv1d_silu_l2 decode, the model's shape (Ch 8192, K 4, q/k 16 x 128, f32 state)", 8192, 4, 16, 128, 0, 2048, graph.F32),
		// The delta rule with the gated norm of its output (fuse-delta-norm) through
		// gpu.Metal's lowering: GQA with Dv not a multiple of the 4 columns a SIMD group
		// takes, Hk = Hv, and the model's heads (a group of 1,024 threads per value head).
		deltaNorm(r, "gated_delta_norm Hk 2 Hv 4 Dk 32 Dv 22", 2, 4, 32, 22, graph.F32),
		deltaNorm(r, "gated_delta_norm Hk = Hv 3 Dk 64 Dv 40", 3, 3, 64, 40, graph.BF16),
		deltaNorm(r, "gated_delta_norm Hk 16 Hv 32 Dk 128 Dv 128 (the model's)", 16, 32, 128, 128, graph.BF16),
		{name: "conv_state_shift decode bf16", op: "conv_state_shift", in: []*ops.Tensor{randtensor.F32(r, 1, 96), randtensor.BF16(r, 3, 96)}, alias: map[int]int{0: 1}, exact: true},
		{name: "conv_state_shift 5 tokens f32", op: "conv_state_shift", in: []*ops.Tensor{randtensor.F32(r, 5, 40), randtensor.F32(r, 3, 40)}, alias: map[int]int{0: 1}, exact: true},
		{name: "router ties", op: "router", attrs: graph.Attrs{"k": 4}, in: []*ops.Tensor{tied(r, 5, 16)}, launch: router},
		{name: "router 256 experts ties", op: "router", attrs: graph.Attrs{"k": 8}, in: []*ops.Tensor{tied(r, 3, 256)}, launch: router},
		{name: "moe_combine", op: "moe_combine", in: []*ops.Tensor{randtensor.F32(r, 3, 4, 40), randtensor.F32(r, 3, 4)}, launch: func(e *env) []Launch {
			return []Launch{{kernels.KernelMoECombine, elementGrid(120), 256, kernels.CombineArgs{Y: e.in[0].addr, W: e.in[1].addr, Out: e.out[0].addr, T: 3, K: 4, H: 40}}}
		}},
		{name: "argmax ties", op: "argmax", in: []*ops.Tensor{argTies}, launch: argmax},
		{name: "sample greedy", op: "argmax", in: []*ops.Tensor{tied(r, 1, 3000)}, launch: sample(kernels.SampleArgs{})},
		{name: "sample greedy, odd vocabulary", op: "argmax", in: []*ops.Tensor{tied(r, 1, 2999)}, launch: sample(kernels.SampleArgs{})},
		{name: "sample greedy, equal logits", op: "argmax", in: []*ops.Tensor{ops.NewTensor(graph.F32, 1, 8192)}, launch: sample(kernels.SampleArgs{})},
		{name: "sample top-k 1", op: "argmax", in: []*ops.Tensor{tied(r, 1, 3000)}, launch: sample(kernels.SampleArgs{Temperature: 1, TopK: 1, SeedLo: 5})},
		{name: "sample top-p nucleus of one", op: "argmax", in: []*ops.Tensor{tied(r, 1, 3000)}, launch: sample(kernels.SampleArgs{Temperature: 0.5, TopP: 1e-6, SeedLo: 9})},
		// gated_rms_norm_matvec_q4 (gpu.Metal): heads of 2 chunks in row groups of 8 lanes;
		// heads of 4 chunks, the second pass over K half empty; the GDN's 32 heads of 128 in
		// row groups of 128 lanes.
		{name: "gated_rms_norm_matvec_q4", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,256]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 4, 64), randtensor.F32(r, 1, 4, 64), randtensor.BF16(r, 64), randtensor.Quant(r, graph.Q4, 40, 256)}},
		{name: "gated_rms_norm_matvec_q4 partial pass", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,384]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 3, 128), randtensor.F32(r, 1, 3, 128), randtensor.F32(r, 128), randtensor.Quant(r, graph.Q4, 72, 384)}},
		{name: "gated_rms_norm_matvec_q4 gdn heads", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,4096]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 32, 128), randtensor.F32(r, 1, 32, 128), randtensor.BF16(r, 128), randtensor.Quant(r, graph.Q4, 20, 4096)}},
		// Fused ops that run as two launches, the second reading the first's scratch.
		{name: "gated_rms_norm_matmul decode", op: "gated_rms_norm_matmul", attrs: graph.Attrs{"eps": 1e-6, "shape": "[1,256]", gpu.AttrGatedNormMatvec: int64(1)},
			in: []*ops.Tensor{randtensor.F32(r, 1, 4, 64), randtensor.F32(r, 1, 4, 64), randtensor.BF16(r, 64), randtensor.Quant(r, graph.Q4, hidden, 256)},
			launch: func(e *env) []Launch {
				normed := e.work(4 * 256)
				mm := kernels.MatmulArgs{W: e.in[3].w, X: normed, Y: e.out[0].addr, Rows: 1, M: hidden, K: 256}
				return []Launch{
					{kernels.KernelGatedRMSNorm, [3]int{4, 1, 1}, 64, kernels.GatedRMSNormArgs{X: e.in[0].addr, Z: e.in[1].addr, Y: normed, W: e.in[2].w, Rows: 4, D: 64, Eps: 1e-6}},
					{kernels.KernelMatvecQ4, [3]int{ceilDiv(hidden, kernels.MatvecRowsPerGroup(256)), 1, 1}, kernels.MatvecThreads, mm},
				}
			}},
		{name: "matmul_router", op: "matmul_router", attrs: graph.Attrs{"k": 4}, in: []*ops.Tensor{randtensor.F32(r, 3, hidden), randtensor.Quant(r, graph.Q8, 16, hidden)},
			launch: func(e *env) []Launch {
				logits := e.work(4 * 3 * 16)
				return []Launch{
					{kernels.KernelMatmulRows, [3]int{2, 1, 1}, 256, kernels.MatmulArgs{W: e.in[1].w, X: e.in[0].addr, Y: logits, Rows: 3, M: 16, K: hidden}},
					{kernels.KernelRouter, [3]int{1, 1, 1}, 128, kernels.RouterArgs{Logits: logits, Weights: e.out[0].addr, Ids: e.out[1].addr, T: 3, E: 16, K: 4}},
				}
			}},
	}, append(attentionPrefillCases(), attentionBlocksCases()...)...)
}

// gdnStep is a one-token gated_delta_step case: x holds q, k and v of Hk, Hk and Hv heads
// and 3 channels past them, the conv state has the given dtype.
func gdnStep(r *rand.Rand, name string, Hk, Hv, Dk, Dv int, state graph.DType) Case {
	return Case{name: name, op: "gated_delta_step",
		attrs: graph.Attrs{"key_heads": int64(Hk), "q_start": int64(0), "k_start": int64(Hk * Dk), "v_start": int64(2 * Hk * Dk),
			"q_eps": 1e-6, "q_scale": 1 / math.Sqrt(float64(Dk)), "k_eps": 1e-6, "k_scale": 1.0, "form": "recurrent", "chunk": int64(64)},
		in: randtensor.GatedDeltaStepInputs(r, Hk, Hv, Dk, Dv, state), alias: map[int]int{1: 7}}
}

// convL2 is a one-token conv1d_silu_l2 case: Ch channels, a conv of K taps, H heads of D
// for q at qs and for k at ks, each part with its own eps and scale.
func convL2(r *rand.Rand, name string, Ch, K, H, D, qs, ks int, state graph.DType) Case {
	return Case{name: name, op: "conv1d_silu_l2",
		attrs: graph.Attrs{"q_start": int64(qs), "q_end": int64(qs + H*D), "k_start": int64(ks), "k_end": int64(ks + H*D),
			"shape": fmt.Sprintf("[1,%d,%d]", H, D), "q_eps": 1e-6, "q_scale": 1 / math.Sqrt(float64(D)), "k_eps": 1e-5, "k_scale": 1.0},
		in: randtensor.ConvL2Inputs(r, 1, Ch, K, state), alias: map[int]int{3: 1}}
}

// deltaNorm is a one-token gated_delta_norm case: q and k scaled as L2-normed heads
// roughly are, a norm weight of the given dtype.
func deltaNorm(r *rand.Rand, name string, Hk, Hv, Dk, Dv int, w graph.DType) Case {
	return Case{name: name, op: "gated_delta_norm", attrs: graph.Attrs{"form": "recurrent", "chunk": int64(64), "eps": 1e-6},
		in: randtensor.GatedDeltaNormInputs(r, Hk, Hv, Dk, Dv, w), alias: map[int]int{1: 5}}
}
