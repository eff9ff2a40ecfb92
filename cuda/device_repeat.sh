#!/bin/bash
# What a kernel's body costs on a decode step's critical path, from the repository root
# with .dev/pistil carried (and any other binaries the variants name): the full synthetic
# model's decode timed with the bodies of some kernels run twice (PZ_REPEAT_KERNELS,
# ops/kernels/prelude_cuda.h), so the step's data and routing stay those of a real step,
# against the same binary without. Every decode kernel but conv1d and gated_delta (their
# state is updated in place) keeps the answer repeated (cuda/emu/repeatable.sh, twenty-
# fifth session). VARIANTS: "name:binary:kernel,kernel ..." (an empty kernel list: the
# plain run), ROUNDS rounds (default 1) of every variant in turn, decode of 64 tokens at
# CONTEXTS (default 0,4096,32768), medians of 3. Logs in $OUT.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
VARIANTS=${VARIANTS:-"plain:.dev/pistil: merge2:.dev/pistil:attention_merge partial2:.dev/pistil:attention_gqa_mma"}
for round in $(seq "${ROUNDS:-1}"); do
	for v in $VARIANTS; do
		IFS=: read -r name bin kernels <<< "$v"
		defines=""
		[ -n "$kernels" ] && defines="PZ_REPEAT_KERNELS=\"$kernels\""
		PISTIL_CUDA_DEFINES="$defines" decode_bench "round $round $name ($bin, twice: ${kernels:-none})" "$OUT/repeat_${round}_$name.txt" 150 \
			"${CONTEXTS:-0,4096,32768}" "$bin"
	done
done
