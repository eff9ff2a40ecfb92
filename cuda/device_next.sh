#!/bin/bash
# Device calls left for the next session, from the repository root with .dev/pistil and
# .dev/cuda.test carried (cuda/device_pack.sh builds both, stripped, into .dev/bin.tar.xz,
# which stays under the 64 MiB a call carries: `tar -C .dev -xJf .dev/bin.tar.xz` first):
#  check:   cuda/device_check.sh on the tree (the ninth session ran the per-op tests, eight
#           pistil check runs and the differential grid on its final kernels, not the rest);
#  floor:   cuda/device_floor.sh, where a decode step's time goes (stages, weight kernels,
#           small kernels, state), to compare a change against the ninth session's table;
#  prefill: BenchmarkPrefill's variants (fused, unfused, SIMT tiles), never run on the H200.
# STEPS picks them (default "check floor"). Logs go to $OUT; each step prints a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
STEPS=${STEPS:-check floor}
has() { [[ " $STEPS " == *" $1 "* ]]; }
has check && { timeout 420 bash cuda/device_check.sh > "$OUT/next_check.txt" 2>&1; echo "check exit $?"; grep -E "passed|FAIL" "$OUT/next_check.txt" | head -20; }
has floor && { timeout 420 bash cuda/device_floor.sh > "$OUT/next_floor.txt" 2>&1; echo "floor exit $?"; cat "$OUT/next_floor.txt"; }
has prefill && (cd cuda && PISTIL_BENCH_MODEL=/tmp/full timeout 240 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime 2x > "$OUT/next_prefill_bench.txt" 2>&1; echo "BenchmarkPrefill exit $?"; grep -E "Benchmark" "$OUT/next_prefill_bench.txt")
