package kernels

// Kernel argument structs, defined once here. Every kernel takes one of these by value
// (`KERNEL(name, Args)`); the C declarations the kernels see are generated from these Go
// types (CDecls), and a test checks that the C layout rules give the offsets Go uses,
// so host and device cannot disagree. Device buffers are passed as uint64 addresses.
// Only uint64, int32, float32, fixed int32 arrays and nested arg structs are allowed.

// DType codes the kernels switch on (DT_* in the generated header).
const (
	DTF32  int32 = 0
	DTBF16 int32 = 1
	DTF16  int32 = 2
	DTQ4   int32 = 3
	DTQ8   int32 = 4
	DTI32  int32 = 5
)

// Unary op codes (UNARY_* in the header).
const (
	UnaryNeg      int32 = 0
	UnaryExp      int32 = 1
	UnarySigmoid  int32 = 2
	UnarySiLU     int32 = 3
	UnarySoftplus int32 = 4
)

// Binary op codes (BINARY_* in the header).
const (
	BinaryAdd    int32 = 0
	BinaryMul    int32 = 1
	BinarySwiGLU int32 = 2
)

// MaxRank is the largest rank the broadcasting kernel walks.
const MaxRank = 4

// Weight locates a weight of any dtype: dense float data, or quantized codes (MLX
// affine: little-endian uint32 words, low bits first) with bf16 scales and biases, one
// of each per Group elements of a row. Stacked weights are contiguous on the device.
type Weight struct {
	Data, Scales, Biases uint64
	DType, Group         int32
}

// EmbedArgs: Out[t, :] = row Ids[t] of W [Vocab, Cols].
type EmbedArgs struct {
	W       Weight
	Ids     uint64
	Out     uint64
	T, Cols int32
	Vocab   int32
}

// DequantArgs: Out [Rows, Cols] f32 = W dequantized.
type DequantArgs struct {
	W          Weight
	Out        uint64
	Rows, Cols int32
}

// MatmulArgs: Y [Rows, M] = X [Rows, K] · Wᵀ, W [M, K].
type MatmulArgs struct {
	W          Weight
	X, Y       uint64
	Rows, M, K int32
}

// ExpertArgs: Y [T, TopK, M], row (t, j) = X(t[, j]) · W[Ids[t, j]]ᵀ, W [E, M, K].
// XPerSlot is 1 when X is [T, TopK, K] (one row per slot), 0 when [T, K].
// W2 is the up projection of expert_matvec_swiglu_q4; Weights [T, TopK] the routing
// weights of expert_matvec_combine_q4 (Y is then [T, M]).
//
// The shared expert's slot (expert_matvec_swiglu_shared_q4, expert_matvec_combine_shared_q4):
// SW and SW2 its gate and up weights [SM, K] with SY [T, SM] their activation, or SW its
// down weight [M, SK] against SX [T, SK], scaled by sigmoid(SGate[t]).
type ExpertArgs struct {
	W, W2      Weight
	X, Ids, Y  uint64
	Weights    uint64
	T, TopK, E int32
	M, K       int32
	XPerSlot   int32
	SW, SW2    Weight
	SX, SY     uint64
	SGate      uint64
	SM, SK     int32
	// expert_matvec_swiglu_routed_q4 routes from Logits [T, E] itself, writes Weights and
	// Ids, and SGate = x·SGWᵀ (the shared expert's gate, q8 [1, K]).
	Logits uint64
	SGW    Weight
}

// Matvec modes (MV_* in the header).
const (
	MatvecSeparate int32 = 0
	MatvecSwiGLU   int32 = 1
)

// MaxFused is the most weights one matvec_fused_q4 launch multiplies.
const MaxFused = 4

// MatvecArgs: decode (one activation row) q4 products with fused prologue/epilogue:
// Y[i] = X·W[i]ᵀ (MatvecSeparate, grid y = i) or Y[0] = silu(X·W[0]ᵀ)·(X·W[1]ᵀ)
// (MatvecSwiGLU); XGate non-zero: X·sigmoid(XGate) instead of X; RowGate non-zero:
// Other + y·sigmoid(RowGate[0]).
//
// Norm (add_rms_norm_matmuls, the norm-matvec passes; only the kernels with a norm read
// it: matvec_q8_norm, matvec_fused_norm_staged_q4): the row multiplied is
// rms_norm(X + Norm.B)·Norm.W, which no kernel before computes: each group sums the
// squares of X + Norm.B over the k it reads anyway, multiplies (X + Norm.B)·Norm.W, and
// scales its products by 1/sqrt(mean + Norm.Eps) at the end. The groups write the sum
// X + Norm.B to Norm.S between them, a share each, and, when Norm.Y is set, the normed
// row to Norm.Y.
type MatvecArgs struct {
	W       [MaxFused]Weight
	Y       [MaxFused]uint64
	M       [MaxFused]int32
	X       uint64
	XGate   uint64
	RowGate uint64
	Other   uint64
	K, Mode int32
	Norm    NormInput
}

// NormInput is a matrix-vector kernel's prologue norm (MatvecArgs.Norm).
type NormInput struct {
	B, S, Y uint64
	W       Weight
	Eps     float32
}

// RMSNormArgs: Y = X / sqrt(mean(X²) + Eps) · W over rows of D. With B non-zero the
// row is first X + B, which is also written to S (add_rms_norm: a residual add and the
// norm of its sum).
type RMSNormArgs struct {
	X, Y    uint64
	B, S    uint64
	W       Weight
	Rows, D int32
	Eps     float32
}

// L2NormArgs: Y = Scale · X / sqrt(ΣX² + Eps) over rows of D. Output row r reads input
// elements from (r / RowsPerOuter)·OuterStride + Start + (r % RowsPerOuter)·D, so a slice
// of the last axis reshaped into heads (slice_l2_norm) needs no copy; a plain l2_norm has
// RowsPerOuter 1, OuterStride D, Start 0.
type L2NormArgs struct {
	X, Y                             uint64
	Rows, D                          int32
	Eps, Scale                       float32
	RowsPerOuter, OuterStride, Start int32
}

// GatedRMSNormArgs: Y = W · rmsnorm(X) · silu(Z) over rows of D.
type GatedRMSNormArgs struct {
	X, Z, Y uint64
	W       Weight
	Rows, D int32
	Eps     float32
}

// GatedNormMatvecArgs: Y [M] = W · (Norm · rmsnorm(X) · silu(Z)) for one decode row X
// [K] (and its gate Z [K]), the norm per head of D values, Norm [D] dense, W [M, K] q4.
type GatedNormMatvecArgs struct {
	W, Norm Weight
	X, Z, Y uint64
	M, K, D int32
	Eps     float32
}

// StepArgs is the layout of the step-scalar buffer that Program.Run writes before every
// step: C (context before the step), T, N (cache capacity), then the T token ids.
type StepArgs struct {
	C, T, N, Pad int32
}

// RoPEArgs: rotate-half RoPE of X [T, Heads, D] on the first Dims dims, positions
// C+t with C read from Steps. With Norm non-zero each head row is first RMS-normed with
// W and Eps (rms_norm_rope). Head row r of X starts XRow elements after row r-1 (D for a
// dense X; the width of the sliced axis when X is a slice read in place,
// slice_rms_norm_rope). Y is f32 [T, Heads, D], or with Append non-zero a cache [N,
// Heads, D] of YDType (f32 or bf16) whose rows C+t are written (rms_norm_rope_append).
type RoPEArgs struct {
	X, Y, Steps       uint64
	W                 Weight
	T, Heads, D, Dims int32
	Theta, Eps        float32
	Norm              int32
	XRow              int32
	Append, YDType    int32
}

// KVAppendArgs: Cache rows C..C+T-1 (Row elements each) ← X.
type KVAppendArgs struct {
	Cache, X, Steps uint64
	T, Row          int32
	CacheDType      int32
}

// AttentionArgs: causal GQA of Q [T, NH, D] over cache rows 0..C+t. With Splits > 1
// (attention_gqa as the plan's attention_partial) the kernel writes Work instead of O:
// T*NH*Splits partial states of D+2 floats (max, sum, unnormalised output). With
// BlockFrom > 0 (attention_gqa only) a query that sees BlockFrom keys or more cuts them
// into ranges of BlockKeys keys (ops.KeyRanges), one that sees fewer into ShortSplits
// ranges, and groups past the ranges in use write nothing.
type AttentionArgs struct {
	Q, K, V, O, Steps                 uint64
	Work                              uint64
	T, NH, KVH, D                     int32
	CacheDType                        int32
	Scale                             float32
	Splits                            int32
	BlockFrom, BlockKeys, ShortSplits int32
}

// AttentionMergeArgs: O [Rows, D] = the softmax-weighted merge of Work [Rows, Splits,
// D+2], attention_gqa's partial states. With BlockFrom > 0 (attention_gqa's fixed-block
// ranges, the same three numbers as its AttentionArgs) only the ranges in use of each
// row's query (token row / NH, which sees C + token + 1 keys) are merged.
type AttentionMergeArgs struct {
	Work, O, Steps                    uint64
	Rows, D, Splits, NH               int32
	BlockFrom, BlockKeys, ShortSplits int32
}

// Conv1DArgs: causal depthwise conv of X [T, Ch] over [State; X] with W [Ch, K]; the
// state [K-1, Ch] is updated in place.
type Conv1DArgs struct {
	X, State, Y uint64
	W           Weight
	T, Ch, K    int32
	StateDType  int32
	SiLU        int32 // apply silu to the output (conv1d_silu)
	// Slices is how many slices of the tokens a group's SIMD groups share out (a divisor
	// of them): one for a decode step, whose groups are 4 x 32 channels.
	Slices int32
	// conv1d_silu_l2, a decode step (one slice) only; HeadDim 0 leaves the epilogue out:
	// the channels [QStart, QStart+NormWidth) and [KStart, KStart+NormWidth) in heads of
	// HeadDim (a multiple of SIMD_WIDTH that divides the group's channels, the starts
	// multiples of it), each L2-normed (Scale / sqrt(sum of squares + Eps)) into QOut and
	// KOut.
	QOut, KOut                 uint64
	QStart, KStart             int32
	NormWidth, HeadDim         int32
	QEps, QScale, KEps, KScale float32
}

// GDNGatesArgs: the Gated DeltaNet gates per (t, head): G = -exp(ALog)·softplus(A +
// DtBias), Beta = sigmoid(B), A and B f32 [T, Hv].
type GDNGatesArgs struct {
	A, B, G, Beta uint64
	ALog, DtBias  Weight
	T, Hv         int32
}

// GatedDeltaArgs: the recurrent gated delta rule over S [Hv, Dk, Dv] (float32).
type GatedDeltaArgs struct {
	Q, K, V, G, Beta, S, O uint64
	T, Hk, Hv, Dk, Dv      int32
}

// GatedDeltaNormArgs: one token of the gated delta rule (Delta: its T is 1, and O, the
// raw output, is written only when not 0) and the gated RMSNorm of each value head's Dv
// outputs into Y [Hv, Dv] = W · o/√(mean(o²) + Eps) · silu(Z), Z f32 [Hv, Dv], W a dense
// [Dv] (gated_delta_norm).
type GatedDeltaNormArgs struct {
	Delta GatedDeltaArgs
	Z, Y  uint64
	W     Weight
	Eps   float32
}

// GatedDeltaStepArgs: one decode token of a Gated DeltaNet layer (gated_delta_step):
// from X (the in_proj_qkv output, f32 [Ch]), the conv state [K-1, Ch] (read only), the
// conv weight [Ch, K] and A, B (f32 [Hv]) with ALog, DtBias [Hv], the q, k and v heads
// at channels QStart, KStart (Hk x Dk each) and VStart (Hv x Dv), and the recurrent step
// over S [Hv, Dk, Dv] (float32, in place) into O [Hv, Dv].
type GatedDeltaStepArgs struct {
	X, A, B, ConvState, S, O   uint64
	ConvW, ALog, DtBias        Weight
	Hk, Hv, Dk, Dv, K, Ch      int32
	QStart, KStart, VStart     int32
	StateDType                 int32
	QEps, QScale, KEps, KScale float32
}

// ConvShiftArgs: the conv state [Rows, Ch] becomes the last Rows rows of [State; X], X
// f32 [T, Ch] (conv_state_shift).
type ConvShiftArgs struct {
	X, State                uint64
	T, Ch, Rows, StateDType int32
}

// UnaryArgs: Y = op(X) elementwise.
type UnaryArgs struct {
	X, Y          uint64
	N, Op, XDType int32
}

// BinaryArgs: Y = op(A, B) with B indexed through BStride over A's Shape (0 where B
// broadcasts). Shape and BStride are right-aligned to MaxRank.
type BinaryArgs struct {
	A, B, Y        uint64
	N, Op          int32
	ADType, BDType int32
	Shape          [MaxRank]int32
	BStride        [MaxRank]int32
}

// SliceArgs: Y [Outer, Len, Inner] = X [Outer, N, Inner][:, Start:Start+Len, :] (4-byte
// elements).
type SliceArgs struct {
	X, Y                        uint64
	Outer, N, Start, Len, Inner int32
}

// RouterArgs: softmax over E, top-K, renormalised.
type RouterArgs struct {
	Logits, Weights, Ids uint64
	T, E, K              int32
}

// RouterQ8Args: router_q8 (moe_cuda.k) routes one token: the logits x·Wᵀ over the E rows
// of the q8 weight W [E, K], then router's softmax, top TopK and renormalised Weights
// [1, TopK] and Ids [1, TopK].
type RouterQ8Args struct {
	W               Weight
	X, Weights, Ids uint64
	E, K, TopK      int32
}

// CombineArgs: Out [T, H] = Σ_j W[t, j] · Y[t, j, :].
type CombineArgs struct {
	Y, W, Out uint64
	T, K, H   int32
}

// ArgmaxArgs: Out[t] = index of the largest X[t, :] (first on ties).
type ArgmaxArgs struct {
	X, Out uint64
	T, V   int32
}

// SampleArgs: the sample kernel (sample.k) picks the next token from Logits [V] and writes
// it to Out. In is the step's input token (the last one generated) and Step the address of
// the generation step's index (the counter of the random draw), both read on the device;
// Counts [V] (0: no penalties) counts each token generated so far, the kernel adding In.
// The seed is SeedHi<<32 | SeedLo; Temperature 0 is greedy.
type SampleArgs struct {
	Logits, Counts, In, Step, Out uint64
	V, TopK, SeedLo, SeedHi       int32
	Temperature, TopP, MinP       float32
	Presence, Frequency           float32
}

// argTypes lists every args struct in declaration order (nested ones first).
var argTypes = []any{
	Weight{}, EmbedArgs{}, DequantArgs{}, MatmulArgs{}, ExpertArgs{}, RMSNormArgs{}, L2NormArgs{},
	GatedRMSNormArgs{}, GatedNormMatvecArgs{}, StepArgs{}, RoPEArgs{}, KVAppendArgs{}, AttentionArgs{}, AttentionMergeArgs{}, Conv1DArgs{},
	GatedDeltaArgs{}, GDNGatesArgs{}, NormInput{}, MatvecArgs{}, UnaryArgs{}, BinaryArgs{}, SliceArgs{}, RouterArgs{}, CombineArgs{}, ArgmaxArgs{},
	SampleArgs{}, GatedDeltaStepArgs{}, ConvShiftArgs{}, GatedDeltaNormArgs{},
	RouterQ8Args{},
}
