#!/bin/bash
# The staged decode attention (attention_gqa_staged, the staged-decode-attention pass) on
# a GPU machine, from the repository root with .dev/pistil, .dev/cuda.test and, for the
# timing, .dev/pistil-base carried (cuda/device_pack.sh with BASE=REV): the attention
# tests of cuda.test (TESTS, a regexp of test names, narrows them), `pistil check
# --backend cuda` on both fixtures with the pass on (decoding from 40, with early loads
# off, with a bf16 cache) and off (the default), then
# decode at CONTEXTS (default 0,4096,32768), base against the tree with the pass off and
# on (cuda/device_early_loads.sh, ROUNDS rounds, default 1). Logs in $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
(cd cuda && timeout 300 ../.dev/cuda.test -test.v -test.count=1 -test.run "^(${TESTS:-TestDecodeAttentionStaged|TestDecodeAttentionMMA|TestAttentionVariants|TestProgrammaticEdgesKeepTheAnswer|TestLongContextOptionsKeepTheAnswer|TestProgramLaunchesExactlyThePlan})\$" > "$OUT/staged_tests.log" 2>&1; echo "cuda.test exit $?" >> "$OUT/staged_tests.log")
grep -E "^(--- FAIL|FAIL|ok|PASS)|^cuda.test exit|panic" "$OUT/staged_tests.log" | head -20
echo "$(grep -c -- '--- PASS' "$OUT/staged_tests.log") tests and subtests passed, $(grep -c -- '--- FAIL' "$OUT/staged_tests.log") failed"
sed 's/^early_loads = true/early_loads = false/' pipeline.toml > /tmp/lateloads.toml
for layout in mlx-q4 hf; do
	dir="testdata/golden/tiny-s1/$layout"
	for args in "--decode-from 40 -pass=staged-decode-attention/on" "--decode-from 40 -pass=staged-decode-attention/on --pipeline /tmp/lateloads.toml" \
		"--decode-from 40 -pass=staged-decode-attention/on --kv-cache bf16 --tolerance bf16-kv" "--decode-from 40"; do
		out=$(./.dev/pistil check --backend cuda --model "$dir" --reference "$dir/reference.safetensors" $args 2>&1)
		echo "check $layout ${args:-whole}: $(echo "$out" | grep -E '^max abs error') $(echo "$out" | grep -E 'PASS|FAIL|rror' | tail -1)"
	done
done
[ "${BENCH:-1}" = 0 ] || LATE=0 ROUNDS=${ROUNDS:-1} CONTEXTS=${CONTEXTS:-0,4096,32768} SWITCHES="staged-decode-attention/on" timeout 400 bash cuda/device_early_loads.sh
