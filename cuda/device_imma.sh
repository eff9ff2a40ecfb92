#!/bin/bash
# The integer twins (imma-matvec) on a GPU machine, from the repository root with
# .dev/pistil and .dev/cuda.test carried: their per-op tests and the kernels they sit
# beside, pistil check on both golden layouts (whole, in chunks of 7, decoding from 40),
# the matrix-vector microbenchmark (bf16 and integer twins on the model's shapes), then
# decode on the full synthetic model with the pass on and off in alternating rounds, and
# the step with the twins' bodies skipped (what they cost beyond their stages).
# STEPS picks (default "tests check micro bench floor"). Logs in $OUT; a summary last.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests check micro bench floor}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if has tests; then
	(cd cuda && timeout 300 ../.dev/cuda.test -test.v -test.count=1 -test.run \
		'TestIMMAMatvecKernelsMatchReferences|TestMMAMatvecKernelsMatchReferences|TestMMAMatvecCasesLowerToTheTwins|TestKernelsMatchReferences|TestProgramLaunchesExactlyThePlan|TestProgrammaticEdgesKeepTheAnswer' \
		> "$OUT/imma_tests.log" 2>&1; echo "cuda.test exit $?" >> "$OUT/imma_tests.log")
	grep -E "^(--- FAIL|FAIL|ok|PASS)|^cuda.test exit|panic" "$OUT/imma_tests.log"
	echo "$(grep -c -- '--- PASS' "$OUT/imma_tests.log") tests and subtests passed, $(grep -c -- '--- FAIL' "$OUT/imma_tests.log") failed"
fi
if has check; then
	for layout in mlx-q4 hf; do
		dir="testdata/golden/tiny-s1/$layout"
		for args in "" "--chunk 7" "--decode-from 40" "--decode-from 40 -pass=imma-matvec/off"; do
			echo "== check $layout $args" >> "$OUT/imma_check.log"
			timeout 120 ./.dev/pistil check --backend cuda --model "$dir" --reference "$dir/reference.safetensors" $args >> "$OUT/imma_check.log" 2>&1
			echo "check $layout ${args:-whole}: exit $? $(grep -E 'max abs' "$OUT/imma_check.log" | tail -1)"
		done
	done
fi
has micro && (cd cuda && timeout 180 ../.dev/cuda.test -test.run '^$' -test.bench MatvecBandwidth -test.benchtime 200x > "$OUT/imma_micro.txt" 2>&1; echo "micro exit $?"; grep -E "copy|Benchmark" "$OUT/imma_micro.txt")
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
B="bench --backend cuda --model /tmp/full --prompts 16 --contexts 0,4096 --decode-tokens 64 --repeats 3"
run() {
	name=$1; shift
	timeout 150 "$@" > "$OUT/imma_$name.txt" 2>&1
	echo "== $name exit $?"
	grep -E "^decode" "$OUT/imma_$name.txt"
}
if has bench; then
	for round in 1 2; do
		run "on$round" ./.dev/pistil $B
		run "off$round" ./.dev/pistil $B -pass=imma-matvec/off
	done
fi
if has floor; then
	run floor_heavy env PISTIL_CUDA_DEFINES='PZ_SKIP_KERNELS="matvec_fused_imma_q4,matvec_imma_q4,expert_matvec_swiglu_shared_imma_q4,expert_matvec_combine_shared_q4"' ./.dev/pistil $B
	run floor_twins env PISTIL_CUDA_DEFINES='PZ_SKIP_KERNELS="matvec_fused_imma_q4,matvec_imma_q4,expert_matvec_swiglu_shared_imma_q4"' ./.dev/pistil $B
fi
