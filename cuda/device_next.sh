#!/bin/bash
# The first device calls the seventh session left for the next one, from the repository
# root with .dev/pistil and .dev/cuda.test carried: the full synthetic model, then
#  bounds:  the q4 GEMMs' launch bounds (MMA_MIN_GROUPS=4 MMA_SK_MIN_GROUPS=5, measured
#           +2.5% and +3.5% at 512 tokens each alone) through the per-op tests and
#           `pistil check` on both golden layouts, and timed together against the default:
#           if both pass and win, make them the defaults in ops/kernels/matmul_mma.k;
#  chunks:  issue 11's prefill chunk sweep, 512 / 1,024 / 2,048 / 4,096 for a 4,096-token
#           prompt (1,024 measured +5.1% over 512), to set pipeline.toml's prefill_chunk;
#  depth:   4,096 tokens prefilled on top of 32,768 (issue 11's 7,000) and decode at a
#           32,768-token context (issue 10's 340);
#  profile: the per-dispatch profile of a 512-token step (cuda/device_prefill_profile.sh)
#           with the q4-only kernels, to see what leads now;
#  prefill: BenchmarkPrefill's variants (fused, unfused, SIMT tiles), never run on the H200.
# STEPS picks them (default "bounds chunks": both fit one call; "depth profile" the next).
# Each step has its own time limit so one slow step leaves the others their results.
# Logs go to $OUT; the last lines printed are a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
STEPS=${STEPS:-bounds chunks}
has() { [[ " $STEPS " == *" $1 "* ]]; }
B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts 0,4096 --decode-tokens 64 --repeats 3"
run() { name=$1; shift; timeout 120 "$@" > "$OUT/next_$name.txt" 2>&1; echo "== $name exit $?"; grep -E "^(prefill|decode)" "$OUT/next_$name.txt"; }
BOUNDS="MMA_MIN_GROUPS=4 MMA_SK_MIN_GROUPS=5"
if has bounds; then
	(cd cuda && PISTIL_CUDA_DEFINES="$BOUNDS" timeout 150 ../.dev/cuda.test -test.count=1 -test.v \
		-test.run 'TestKernelsMatchReferences|TestMMAKernelsMatchReferences|TestMMAMatvec|TestOpCasesAreValid|TestGrid' > "$OUT/next_bounds_tests.txt" 2>&1
		echo "bounds tests exit $?: $(grep -c -- '--- PASS' "$OUT/next_bounds_tests.txt") pass, $(grep -c -- '--- FAIL' "$OUT/next_bounds_tests.txt") fail")
	for layout in mlx-q4 hf; do
		d=testdata/golden/tiny-s1/$layout
		for a in "" "--chunk 7" "--chunk 32" "--decode-from 40"; do
			echo "== bounds check $layout $a: $(PISTIL_CUDA_DEFINES="$BOUNDS" ./.dev/pistil check --backend cuda --model $d --reference $d/reference.safetensors $a 2>&1 | grep -E '^PASS|FAIL' | head -1)"
		done
	done
	run default1 ./.dev/pistil $B
	run bounds1 env PISTIL_CUDA_DEFINES="$BOUNDS" ./.dev/pistil $B
	run default2 ./.dev/pistil $B
	run bounds2 env PISTIL_CUDA_DEFINES="$BOUNDS" ./.dev/pistil $B
fi
if has chunks; then
	for c in 512 1024 2048 4096; do
		run chunk$c ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 4096 --contexts "" --chunk $c --repeats 3
	done
fi
if has depth; then
	run depth32k ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 4096 --depths 32768 --contexts "" --repeats 3
	run ctx32k ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 512 --contexts 32768 --decode-tokens 64 --repeats 3
fi
has profile && { TOKENS=512 DEPTH=0 timeout 300 bash cuda/device_prefill_profile.sh > "$OUT/next_profile.txt" 2>&1; echo "profile exit $?"; }
has prefill && (cd cuda && PISTIL_BENCH_MODEL=/tmp/full timeout 240 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime 2x > "$OUT/next_prefill_bench.txt" 2>&1; echo "BenchmarkPrefill exit $?")
echo "== summary"
has profile && head -30 "$OUT/next_profile.txt"
has prefill && grep -E "Benchmark" "$OUT/next_prefill_bench.txt"
