#!/bin/bash
# Device calls left for the next session, from the repository root with .dev/pistil and
# .dev/cuda.test carried: the full synthetic model, then
#  bounds:  the q4 GEMMs' launch bounds (default since the eighth session) timed against
#           the compiler's own choice (MMA_MIN_GROUPS=0 MMA_SK_MIN_GROUPS=0);
#  depth:   4,096 tokens prefilled on top of 32,768 (issue 11's 7,000) and decode at a
#           32,768-token context (issue 10's 340);
#  profile: the per-dispatch profile of a 1,024-token step (cuda/device_prefill_profile.sh),
#           to see what leads now;
#  prefill: BenchmarkPrefill's variants (fused, unfused, SIMT tiles), never run on the H200.
# STEPS picks them (default "depth profile").
# Each step has its own time limit so one slow step leaves the others their results.
# Logs go to $OUT; the last lines printed are a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
STEPS=${STEPS:-depth profile}
has() { [[ " $STEPS " == *" $1 "* ]]; }
B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts 0,4096 --decode-tokens 64 --repeats 3"
run() { name=$1; shift; timeout 120 "$@" > "$OUT/next_$name.txt" 2>&1; echo "== $name exit $?"; grep -E "^(prefill|decode)" "$OUT/next_$name.txt"; }
NOBOUNDS="MMA_MIN_GROUPS=0 MMA_SK_MIN_GROUPS=0"
if has bounds; then
	run default1 ./.dev/pistil $B
	run nobounds1 env PISTIL_CUDA_DEFINES="$NOBOUNDS" ./.dev/pistil $B
	run default2 ./.dev/pistil $B
	run nobounds2 env PISTIL_CUDA_DEFINES="$NOBOUNDS" ./.dev/pistil $B
fi
if has depth; then
	run depth32k ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 4096 --depths 32768 --contexts "" --repeats 3
	run ctx32k ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 512 --contexts 32768 --decode-tokens 64 --repeats 3
fi
has profile && { TOKENS=1024 DEPTH=0 timeout 300 bash cuda/device_prefill_profile.sh > "$OUT/next_profile.txt" 2>&1; echo "profile exit $?"; }
has prefill && (cd cuda && PISTIL_BENCH_MODEL=/tmp/full timeout 240 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime 2x > "$OUT/next_prefill_bench.txt" 2>&1; echo "BenchmarkPrefill exit $?")
echo "== summary"
has profile && head -30 "$OUT/next_profile.txt"
has prefill && grep -E "Benchmark" "$OUT/next_prefill_bench.txt"
