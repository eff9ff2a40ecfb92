#!/bin/bash
# The decode passes that are off by default, timed again against the defaults on a GPU
# machine (they were measured slower before later kernels changed what they fuse around),
# from the repository root with .dev/pistil carried (cuda/device_pack.sh): `pistil bench
# --backend cuda` on the full synthetic model, decode of 64 tokens at CONTEXTS (default
# 0,4096), medians of 3, ROUNDS rounds (default 2) alternating. Logs in $OUT.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
CONTEXTS=${CONTEXTS:-0,4096}
ROUNDS=${ROUNDS:-2}
SWITCHES=${SWITCHES:-fuse-expert-routing/on gated-norm-matvec/on fuse-gdn-prologue/on}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
for round in $(seq "$ROUNDS"); do
	for sw in default $SWITCHES; do
		flag=""
		[ "$sw" = default ] || flag="-pass=$sw"
		decode_bench "round $round $sw" "$OUT/switch_${round}_${sw%%/*}.txt" 120 "$CONTEXTS" ./.dev/pistil $flag
	done
done
