#!/bin/bash
# The thirty-second session's one call, in the order that matters if the call is cut
# (the session's device time was short): .dev/all.tar.xz (cuda/device_pack_pending.sh)
# extracted; the full model made in the background while the two
# variants' attention tests and checks run, then their timing at depth against main, the
# bf16-cache grid at head dim 256, then cuda/device_check.sh on the tree (the bf16
# products) with what time is left.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
( [ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1; echo "synth exit $?" >> "$OUT/synth.log" ) &
OUT=$OUT STEPS=tests timeout 150 bash cuda/device_stage_chunk.sh
wait
tail -1 "$OUT/synth.log"
OUT=$OUT STEPS=depth ROUNDS=1 timeout 200 bash cuda/device_stage_chunk.sh
OUT=$OUT STEPS=grid timeout 100 bash cuda/device_stage_chunk.sh
OUT=$OUT timeout "${CHECK_SECONDS:-300}" bash cuda/device_check.sh > "$OUT/next_check.txt" 2>&1
echo "check exit $?"
grep -E "passed|FAIL|exit" "$OUT/next_check.txt" | head -12
echo "check lines PASS: $(grep -c '^PASS' "$OUT/next_check.txt")"
