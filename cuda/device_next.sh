#!/bin/bash
# The first device call the sixth session left for the next one, from the repository root
# with .dev/pistil and .dev/cuda.test carried: the full synthetic model, then
#  1. the wide fixture and the tensor-core paths' checks with 3, 2 and 1 activation parts
#     (cuda/device_wide_fixture.sh: does bf16 activations, +11% prefill, meet issue 11's
#     bound of top-1 >= 99.5% and a perplexity ratio within 1.0002?);
#  2. why the decode matrix-vector twins read 0.6-0.85 TB/s (cuda/device_stalls.sh);
#  3. BenchmarkPrefill's variants (fused, unfused, SIMT tiles), never run on the H200;
#  4. the default decode and prefill figures of the tree (pistil bench).
# STEPS picks them (default "wide stalls": both fit one 10-minute call; "prefill bench" the
# next). Each step has its own time limit so one slow step leaves the others their results.
# Logs go to $OUT; the last lines printed are a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
STEPS=${STEPS:-wide stalls}
has() { [[ " $STEPS " == *" $1 "* ]]; }
has wide && { timeout 330 bash cuda/device_wide_fixture.sh > "$OUT/next_wide.txt" 2>&1; echo "wide fixture exit $?"; }
has stalls && { timeout 150 bash cuda/device_stalls.sh > "$OUT/next_stalls.txt" 2>&1; echo "stalls exit $?"; }
has prefill && (cd cuda && PISTIL_BENCH_MODEL=/tmp/full timeout 240 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime 2x > "$OUT/next_prefill_bench.txt" 2>&1; echo "BenchmarkPrefill exit $?")
has bench && { timeout 150 ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts 0,4096 --decode-tokens 64 --repeats 3 > "$OUT/next_bench.txt" 2>&1; echo "bench exit $?"; }
echo "== summary"
has wide && grep -E "^== |max abs|top-1|perplexity" "$OUT/next_wide.txt" | head -70
has prefill && grep -E "Benchmark" "$OUT/next_prefill_bench.txt"
has bench && grep -E "^(prefill|decode)" "$OUT/next_bench.txt"
has stalls && tail -40 "$OUT/next_stalls.txt"
