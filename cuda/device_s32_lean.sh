#!/bin/bash
# cuda/device_s32.sh for a call of a few minutes (the session's last device time): the
# full model made first, then the depth timing of both variants against main with one
# repeat each, then their attention tests and checks.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
OUT=$OUT STEPS=depth ROUNDS=1 REPEATS=1 VARIANTS="bm stage" bash cuda/device_stage_chunk.sh
OUT=$OUT STEPS=tests bash cuda/device_stage_chunk.sh
