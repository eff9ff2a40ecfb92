package grid

import "pistil/models/synth"

// Shapes is the differential grid: a covering set of the architecture's dimensions, not
// their product. Every value the kernels branch on appears at least once (TestCoverage
// checks it): head dims 64/128/256; query heads per KV head 1, 2, 4, 8; 1 and 2 KV heads;
// Gated DeltaNet key heads equal to and half the value heads, key and value head dims
// that differ; top-k 1/2/4/8 of 4, 8 and 64 experts; full attention every 1st, 2nd and
// 4th layer; hidden 64 to 2048; MLX 4-bit, MLX 8-bit and bf16 layouts. CI marks the
// shapes small enough for the CPU self-consistency test that CI runs; the GPU runs all.
//
// A kernel change runs it: `go test ./cuda -run TestGrid` on a GPU machine
// (cuda/device_grid.sh).
var Shapes = []Shape{
	// The shape of issue 10 (reported wrong on the H200 through decode and in chunks of 7,
	// on MLX 4-bit only).
	{Name: "issue10", Layout: synth.MLXQ4, CI: true, Dims: issue10},
	{Name: "issue10", Layout: synth.MLXQ8, Dims: issue10},
	{Name: "issue10", Layout: synth.HF, CI: true, Dims: issue10},
	// Attention in every layer (no Gated DeltaNet), one query head per KV head, top-1 of 4.
	{Name: "h64-mha", Layout: synth.MLXQ4, CI: true, Dims: synth.Dims{Vocab: 512, Hidden: 64, Layers: 2, AttentionInterval: 1,
		Heads: 1, KVHeads: 1, HeadDim: 64, LinearKeyHeads: 2, LinearValueHeads: 2, LinearKeyDim: 32, LinearValueDim: 32, ConvKernel: 4,
		Experts: 4, TopK: 1, ExpertWidth: 64, SharedWidth: 64}},
	// head_dim 256 on a narrow residual, every expert of 4 routed, key dim > value dim.
	{Name: "h64-d256-top4of4", Layout: synth.MLXQ4, CI: true, Dims: synth.Dims{Vocab: 512, Hidden: 64, Layers: 4, AttentionInterval: 4,
		Heads: 2, KVHeads: 1, HeadDim: 256, LinearKeyHeads: 1, LinearValueHeads: 2, LinearKeyDim: 128, LinearValueDim: 32, ConvKernel: 4,
		Experts: 4, TopK: 4, ExpertWidth: 64, SharedWidth: 64}},
	// Every query head on one of two KV heads, top-8 of 8, attention every layer.
	{Name: "h128-mha-top8of8", Layout: synth.HF, CI: true, Dims: synth.Dims{Vocab: 512, Hidden: 128, Layers: 3, AttentionInterval: 1,
		Heads: 2, KVHeads: 2, HeadDim: 128, LinearKeyHeads: 2, LinearValueHeads: 2, LinearKeyDim: 64, LinearValueDim: 64, ConvKernel: 4,
		Experts: 8, TopK: 8, ExpertWidth: 64, SharedWidth: 64}},
	// The real head layout (16 query heads on 2 KV heads of 256) at hidden 256, top-8 of 64.
	{Name: "h256-gqa8-top8of64", Layout: synth.MLXQ4, Dims: synth.Dims{Vocab: 512, Hidden: 256, Layers: 4, AttentionInterval: 4,
		Heads: 16, KVHeads: 2, HeadDim: 256, LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 128, LinearValueDim: 64, ConvKernel: 4,
		Experts: 64, TopK: 8, ExpertWidth: 64, SharedWidth: 128}},
	// 4 query heads per KV head on 2 KV heads, top-2 of 4, value dim > key dim.
	{Name: "h256-gqa4-top2of4", Layout: synth.MLXQ8, Dims: synth.Dims{Vocab: 512, Hidden: 256, Layers: 4, AttentionInterval: 2,
		Heads: 8, KVHeads: 2, HeadDim: 128, LinearKeyHeads: 2, LinearValueHeads: 2, LinearKeyDim: 64, LinearValueDim: 128, ConvKernel: 4,
		Experts: 4, TopK: 2, ExpertWidth: 128, SharedWidth: 64}},
	// 2 query heads on one KV head, half as many DeltaNet key heads as value heads.
	{Name: "h512-gqa2-top4of8", Layout: synth.MLXQ8, Dims: synth.Dims{Vocab: 512, Hidden: 512, Layers: 4, AttentionInterval: 2,
		Heads: 2, KVHeads: 1, HeadDim: 128, LinearKeyHeads: 4, LinearValueHeads: 8, LinearKeyDim: 32, LinearValueDim: 128, ConvKernel: 4,
		Experts: 8, TopK: 4, ExpertWidth: 256, SharedWidth: 128}},
	{Name: "h768-gqa2-top2of64", Layout: synth.HF, Dims: synth.Dims{Vocab: 512, Hidden: 768, Layers: 3, AttentionInterval: 1,
		Heads: 4, KVHeads: 2, HeadDim: 64, LinearKeyHeads: 4, LinearValueHeads: 4, LinearKeyDim: 64, LinearValueDim: 64, ConvKernel: 4,
		Experts: 64, TopK: 2, ExpertWidth: 192, SharedWidth: 128}},
	// 4 query heads on one KV head of 64, top-1 of 64.
	{Name: "h1024-gqa4-top1of64", Layout: synth.MLXQ4, Dims: synth.Dims{Vocab: 512, Hidden: 1024, Layers: 4, AttentionInterval: 4,
		Heads: 4, KVHeads: 1, HeadDim: 64, LinearKeyHeads: 8, LinearValueHeads: 8, LinearKeyDim: 128, LinearValueDim: 64, ConvKernel: 4,
		Experts: 64, TopK: 1, ExpertWidth: 128, SharedWidth: 256}},
	// The real per-layer widths of the 35B-A3B at fewer experts and layers, in every layout.
	{Name: "h2048-real", Layout: synth.MLXQ4, Dims: real2048},
	{Name: "h2048-real", Layout: synth.MLXQ8, Dims: real2048},
	{Name: "h2048-real", Layout: synth.HF, Dims: real2048},
	// The GPU's tile choices at their edges, whole (83 tokens): attention's q projection
	// and the DeltaNet's qkv projection have 8,192 rows, 256 tiles of 64x64, which
	// split-k-only-idle moves from the split-k tile to the wide one; 48 experts top-8 get
	// 13.8 rows each, which busy-expert-tiles gives the wide 32-row tile (64-token chunks,
	// 10.7 rows, keep the 16-row tile).
	{Name: "h256-wide-edges", Layout: synth.MLXQ4, Dims: synth.Dims{Vocab: 512, Hidden: 256, Layers: 2, AttentionInterval: 2,
		Heads: 16, KVHeads: 2, HeadDim: 256, LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
		Experts: 48, TopK: 8, ExpertWidth: 128, SharedWidth: 256}},
	// 8 query heads per KV head of 128, top-4 of 64.
	{Name: "h2048-gqa8-top4of64", Layout: synth.MLXQ4, Dims: synth.Dims{Vocab: 512, Hidden: 2048, Layers: 2, AttentionInterval: 2,
		Heads: 8, KVHeads: 1, HeadDim: 128, LinearKeyHeads: 8, LinearValueHeads: 16, LinearKeyDim: 64, LinearValueDim: 128, ConvKernel: 4,
		Experts: 64, TopK: 4, ExpertWidth: 256, SharedWidth: 512}},
}

// issue10 is the shape of issue 10 (hidden 128, 6 layers, full attention every 2nd, 4
// query and 2 KV heads of 128, 4 DeltaNet key and value heads of 64 and 32, top-2 of 8
// experts of width 128, shared width 64).
var issue10 = synth.Dims{Vocab: 512, Hidden: 128, Layers: 6, AttentionInterval: 2,
	Heads: 4, KVHeads: 2, HeadDim: 128, LinearKeyHeads: 4, LinearValueHeads: 4, LinearKeyDim: 64, LinearValueDim: 32, ConvKernel: 4,
	Experts: 8, TopK: 2, ExpertWidth: 128, SharedWidth: 64}

var real2048 = synth.Dims{Vocab: 512, Hidden: 2048, Layers: 4, AttentionInterval: 4,
	Heads: 16, KVHeads: 2, HeadDim: 256, LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128, ConvKernel: 4,
	Experts: 64, TopK: 8, ExpertWidth: 128, SharedWidth: 256}
