#!/bin/bash
# Correctness on a GPU machine, from the repository root, with the binaries and the
# binaries carried in .dev/ (see cuda/README.md):
#   .dev/pistil, .dev/cuda.test; the golden checkpoints are the repository's testdata/golden/tiny-s1
# Logs go to $OUT (the device tool's output folder) or /tmp/cuda-out.
# PARTS picks (default "tests checks"): the cuda.test binary (about 200 s on an H100) and
# the pistil check lines (about 390 s). Whole, the script took 588 s on an H100 in the
# thirty-sixth session, against a device call's 600: give each part a call of its own.
# LAYOUTS picks the golden layouts the checks run on (default "mlx-q4 hf"): on an H100
# the checks of both took more than 420 s in the thirty-eighth session (111 of 152 lines
# by then), so give each layout a call (LAYOUTS=mlx-q4, then LAYOUTS=hf). SKIP, below,
# resumes a run that was cut short.
set -u
PARTS=${PARTS:-tests checks}
LAYOUTS=${LAYOUTS:-mlx-q4 hf}
has() { [[ " $PARTS " == *" $1 "* ]]; }
hasLayout() { [[ " $LAYOUTS " == *" $1 "* ]]; }
# The golden fixtures of this copy of the tree: a test binary built elsewhere (a
# throwaway worktree) would look for them where it was built.
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
# The whole log to a file first: a reader that stops early (head) would kill the test
# binary through its pipe.
if has tests; then
	(cd cuda && ../.dev/cuda.test -test.v -test.count=1 > "$OUT/cuda_test.log" 2>&1; echo "cuda.test exit $?" >> "$OUT/cuda_test.log")
	grep -E "^(--- FAIL|FAIL|ok|PASS)|^cuda.test exit|panic" "$OUT/cuda_test.log"
	echo "$(grep -c -- '--- PASS' "$OUT/cuda_test.log") tests and subtests passed, $(grep -c -- '--- FAIL' "$OUT/cuda_test.log") failed"
fi
has checks || exit 0
# Every fusion pass off: the plans of primitive ops.
NOFUSE="-pass=fuse-gdn-gates/off -pass=fuse-conv-silu/off -pass=fuse-slice-l2/off -pass=fuse-gdn-prologue/off -pass=fuse-conv-l2/off -pass=fuse-delta-norm/off -pass=fuse-norm-out-proj/off -pass=fuse-qk-norm-rope/off -pass=fuse-slice-rope/off -pass=fuse-rope-append/off -pass=fuse-attn-gate/off -pass=fuse-swiglu/off -pass=fuse-router/off -pass=fuse-moe-combine/off -pass=fuse-shared-gate/off -pass=fuse-shared-expert/off -pass=fuse-expert-routing/off -pass=fuse-projections/off -pass=fuse-add-norm/off"
sed 's/^graphs = true/graphs = false/' pipeline.toml > /tmp/nographs.toml
sed 's/^programmatic_launch = true/programmatic_launch = false/' pipeline.toml > /tmp/fulledges.toml
sed 's/^early_loads = true/early_loads = false/' pipeline.toml > /tmp/lateloads.toml
# Decode's fixed-block key split switched on inside the fixtures' context (from 48 keys,
# blocks of 16: up to 8 blocks by the last token), and never (the equal split only).
sed -e 's/^key_block_split_from = .*/key_block_split_from = 48/' -e 's/^key_block_keys = .*/key_block_keys = 16/' pipeline.toml > /tmp/blocks48.toml
sed 's/^key_block_split_from = .*/key_block_split_from = 0/' pipeline.toml > /tmp/noblocks.toml
# [cuda] kernel_defines' example: the prefill mma's partial tiles unguarded off and every
# token sub-tile multiplied (tuning macros that change no stored value).
sed 's/^# kernel_defines = /kernel_defines = /' pipeline.toml > /tmp/defines.toml
# The chunked gated delta's products as SIMT dot products (GDC_MMA=0; the tensor-core form,
# 1, is the default).
sed 's/^# kernel_defines = .*/kernel_defines = ["GDC_MMA=0"]/' pipeline.toml > /tmp/gdcsimt.toml
# The prefill GEMMs' q4 kernels with their activations in two fp16 parts (MMA_F16=1;
# three bf16 parts are the default).
sed 's/^# kernel_defines = .*/kernel_defines = ["MMA_F16=1"]/' pipeline.toml > /tmp/f16x.toml
# Decode attention over a bf16 cache in 8-byte loads, a tile ahead (AD_BF16_WIDE=0; 16-byte
# loads, two tiles at a time, are the default since the fortieth session).
sed 's/^# kernel_defines = .*/kernel_defines = ["AD_BF16_WIDE=0"]/' pipeline.toml > /tmp/narrowbf16.toml
grep -q '^kernel_defines = ' /tmp/defines.toml || { echo "pipeline.toml has no kernel_defines example"; exit 1; }
# SKIP=N passes over the first N check lines of this run's layouts: a call that ran out of
# time resumes at the line it did not finish (the H100 of the forty-first session ran 131
# of 154 lines in 570 s, then the other 23 with SKIP=131).
SKIP=${SKIP:-0}
checked=0
check() {
	checked=$((checked + 1))
	[ "$checked" -le "$SKIP" ] && return 0
	echo "== check $*" | tee -a "$OUT/check.log"
	./.dev/pistil check --backend cuda "$@" 2>&1 | tee -a "$OUT/check.log" | grep -E "max abs|top-1|greedy|PASS|FAIL|rror"
}
for layout in $LAYOUTS; do
	dir="testdata/golden/tiny-s1/$layout"
	ref="$dir/reference.safetensors"
	# The default pipeline (every fusion pass on).
	check --model "$dir" --reference "$ref"
	check --model "$dir" --reference "$ref" --chunk 7
	check --model "$dir" --reference "$ref" --decode-from 40
	check --model "$dir" --reference "$ref" --decode-from 40 --pipeline /tmp/nographs.toml
	check --model "$dir" --reference "$ref" --chunk 7 --pipeline /tmp/fulledges.toml
	# Every kernel waiting at entry ([cuda] early_loads off).
	check --model "$dir" --reference "$ref" --decode-from 40 --pipeline /tmp/lateloads.toml
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=split-attention/off
	# Decode attention staged through group memory (attention_gqa_staged, off by default),
	# with its early copies and with every kernel waiting at entry, and over a bf16 cache.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=staged-decode-attention/on
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=staged-decode-attention/on --pipeline /tmp/lateloads.toml
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=staged-decode-attention/on --kv-cache bf16 --tolerance bf16-kv
	# A bf16 KV cache, held to its own bound (verify's bf16-kv: the CPU measured max abs
	# 0.036-0.0372, top-1 100%), whole, in chunks of 7 and decoding from 40.
	check --model "$dir" --reference "$ref" --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --kv-cache bf16 --tolerance bf16-kv --chunk 7
	check --model "$dir" --reference "$ref" --kv-cache bf16 --tolerance bf16-kv --decode-from 40
	# The fixed-block key split inside the context, with both KV types, and never.
	check --model "$dir" --reference "$ref" --decode-from 40 --pipeline /tmp/blocks48.toml
	check --model "$dir" --reference "$ref" --decode-from 40 --pipeline /tmp/blocks48.toml --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --decode-from 40 --pipeline /tmp/noblocks.toml
	# The SIMT tiles instead of the tensor-core GEMMs (on by default), whole and in
	# chunks past the mma thresholds (more than 8 rows), and the mma expert kernels for
	# the routed slots expert-per-slot would take.
	check --model "$dir" --reference "$ref" -pass=tensor-cores/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=tensor-cores/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=expert-per-slot/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=mma-split-k/off
	# Chunks of 32 with the short-step kernels: the q4 layout's matmuls on matvec_q4_rows,
	# its routed experts (8 rows each on average) gathered on expert_matvec_gather_q4,
	# then one tile per slot on expert_matvec_q4.
	check --model "$dir" --reference "$ref" --chunk 32 -pass=batched-matvec/on -pass=expert-gather/on
	check --model "$dir" --reference "$ref" --chunk 32 -pass=expert-per-slot/on
	# The split-k expert tiles (expert-split-k, off by default since the fourteenth
	# session): with expert-per-slot off the fixture's chunks of 32 give them its experts.
	check --model "$dir" --reference "$ref" --chunk 32 -pass=expert-split-k/on -pass=expert-per-slot/off
	# The wide tiles (mma-wide-rows, on by default): with mma-split-k and expert-per-slot
	# off the fixture's matmuls run on matmul_mma_wide (its experts' tiles hold 16 rows, so
	# expert_mma32w runs in the per-op tests only); with the pass off too, on matmul_mma.
	check --model "$dir" --reference "$ref" -pass=mma-wide-rows/on -pass=mma-split-k/off -pass=expert-per-slot/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=mma-wide-rows/on -pass=mma-split-k/off -pass=expert-per-slot/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=mma-wide-rows/off -pass=mma-split-k/off -pass=expert-per-slot/off
	check --model "$dir" --reference "$ref" --chunk 32 -pass=mma-split-k/off -pass=expert-per-slot/off --pipeline /tmp/defines.toml
	# busy-expert-tiles (on by default): chunks of 64 give the fixture's 16 experts 16 rows
	# each on average (top-4), so with expert-per-slot off their 16-row tiles grow to the
	# wide tile of 32 (expert_mma32w), or stay 16 with the pass off.
	check --model "$dir" --reference "$ref" --chunk 64 -pass=expert-per-slot/off
	check --model "$dir" --reference "$ref" --chunk 64 -pass=expert-per-slot/off -pass=busy-expert-tiles/off
	# The chunked gated delta rule (chunked-delta) is on by default, so every line without
	# it runs prefill steps' GDN recurrence on gated_delta_chunked (chunks of 7 and 32 are
	# partial chunks of the kernel's 64); these keep the recurrent gated_delta's prefill
	# path checked: whole, in chunks of 7 and decoding from 40.
	check --model "$dir" --reference "$ref" -pass=chunked-delta/off
	check --model "$dir" --reference "$ref" --chunk 7 -pass=chunked-delta/off
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=chunked-delta/off
	# gated_delta_chunked with GDC_MMA=0 (SIMT products): whole and in chunks of 7.
	check --model "$dir" --reference "$ref" --pipeline /tmp/gdcsimt.toml
	check --model "$dir" --reference "$ref" --chunk 7 --pipeline /tmp/gdcsimt.toml
	# The q4 GEMMs with fp16 activations (MMA_F16=1): whole and in chunks of 32.
	check --model "$dir" --reference "$ref" --pipeline /tmp/f16x.toml
	check --model "$dir" --reference "$ref" --chunk 32 --pipeline /tmp/f16x.toml
	# The decode matrix-vector products on the SIMT kernels instead of their tensor-core
	# twins (mma-matvec, on by default).
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=mma-matvec/off
	check --model "$dir" --reference "$ref" --chunk 7 -pass=mma-matvec/off
	# The twins with each warp's own loads instead of the tiles staged in group memory
	# (staged-matvec, on by default).
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=staged-matvec/off
	check --model "$dir" --reference "$ref" --chunk 7 -pass=staged-matvec/off
	# Decode attention with the SIMT attention_gqa instead of its tensor-core form
	# (mma-decode-attention, on by default), with each cache type, and the tensor-core form
	# for a prefill step left untiled.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=mma-decode-attention/off
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=mma-decode-attention/off --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --decode-from 40 --kv-cache bf16 --tolerance bf16-kv --pipeline /tmp/narrowbf16.toml
	check --model "$dir" --reference "$ref" --chunk 7 -pass=tile-attention/off -pass=mma-decode-attention/off
	# The GDN decode prologue inside the step (gated_delta_step + conv_state_shift; off by
	# default: slower on the H200) instead of staged.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-gdn-prologue/on
	# The q/k L2 norms as two slice_l2_norms a stage after the conv instead of in the
	# decode conv kernel's epilogue (conv1d_silu_l2; fuse-conv-l2, on by default since the
	# eighteenth session).
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-conv-l2/off
	# The GDN's gated norm inside the recurrent step (gated_delta_norm, one group per value
	# head; off by default: not faster on the H100) instead of its own stage before out_proj, in
	# decode and in prefill chunks of one token (which it fuses too).
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-delta-norm/on
	check --model "$dir" --reference "$ref" --chunk 1 -pass=fuse-delta-norm/on
	# Prefill attention one group per (kv head, token): attention_gqa_mma (attention_gqa
	# with mma-decode-attention off, above) instead of attention_prefill.
	check --model "$dir" --reference "$ref" --chunk 7 -pass=tile-attention/off
	# Tiled prefill attention on the tensor cores (attention_prefill_mma; mma-attention),
	# whole, in chunks (the earlier chunks' keys in the cache) and before decode.
	check --model "$dir" --reference "$ref" -pass=mma-attention/on
	check --model "$dir" --reference "$ref" --chunk 7 -pass=mma-attention/on
	check --model "$dir" --reference "$ref" --chunk 32 -pass=mma-attention/on
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=mma-attention/on
	# Prefill attention over a bf16 cache: with whole rows a warp (attention_prefill_fa2;
	# fa2-attention, on by default) in chunks of 32, and on attention_prefill_mma (off),
	# whole, in chunks of 7 and 32, and before decode (the other bf16 lines run the default).
	check --model "$dir" --reference "$ref" --chunk 32 --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" -pass=fa2-attention/off --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --chunk 7 -pass=fa2-attention/off --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --chunk 32 -pass=fa2-attention/off --kv-cache bf16 --tolerance bf16-kv
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fa2-attention/off --kv-cache bf16 --tolerance bf16-kv
	# The GDN gated norm in out_proj's kernel (gated_rms_norm_matvec_q4; off by default:
	# slower on the H200), and the norm fusion off altogether.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=gated-norm-matvec/on
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-norm-out-proj/off
	# The query slice and the key append as dispatches of their own (rope kernel reading in
	# place / writing the cache off), each alone, in decode and in prefill chunks.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-slice-rope/off
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-rope-append/off
	check --model "$dir" --reference "$ref" --chunk 7 -pass=fuse-slice-rope/off -pass=fuse-rope-append/off
	# The shared expert in dispatches of its own (matmul_swiglu, matmul_gated_add), not as
	# one more slot of the routed experts' kernels.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-shared-expert/off
	# The router's softmax/top-k inside the routed experts' kernel (off by default: slower
	# on the H200) instead of its own dispatch after its projection.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=fuse-expert-routing/on
	# The router's q8 projection and its routing in one kernel, router_q8, the last group
	# to finish routing (router-matvec, off by default: slower on the H100), instead of
	# matvec_q8 and router; the mlx-q4 layout's q8 gates take it, the hf layout's bf16
	# ones never do. In decode and in prefill chunks of one token.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=router-matvec/on
	check --model "$dir" --reference "$ref" --chunk 1 -pass=router-matvec/on
	# The post-attention norms as launches of their own (add_rms_norm) instead of inside
	# the routers' q8 projections (norm-matvec, on by default since the nineteenth
	# session), and the input projections' and lm_head's inside their q4 projections
	# (norm-matvec-q4, off: slower on the H100); the mlx-q4 layout's projections take them,
	# the hf layout's bf16 ones never do. In decode and in prefill chunks of one token.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=norm-matvec/off
	check --model "$dir" --reference "$ref" --chunk 1
	check --model "$dir" --reference "$ref" --chunk 1 -pass=norm-matvec/off
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=norm-matvec-q4/on
	check --model "$dir" --reference "$ref" --chunk 1 -pass=norm-matvec-q4/on
	# The GDN value heads copied out of the convolution's output instead of read in place
	# (slice-views, on by default since the fifteenth session), in decode and chunks of 1.
	check --model "$dir" --reference "$ref" --decode-from 40 -pass=slice-views/off
	check --model "$dir" --reference "$ref" --chunk 1 -pass=slice-views/off
	# The primitive ops only.
	check --model "$dir" --reference "$ref" --chunk 7 $NOFUSE
	check --model "$dir" --reference "$ref" --decode-from 40 $NOFUSE
done
if hasLayout mlx-q4; then
	check --model testdata/golden/tiny-s1/mlx-q4 --reference testdata/golden/tiny-s1/mlx-q4/reference.safetensors -pass=all/off
fi
if hasLayout hf; then
	check --model testdata/golden/tiny-s1/hf --reference testdata/golden/tiny-s1/hf/reference.safetensors -pass=all/off --decode-from 40
fi
