#!/bin/bash
# The decode matrix-vector twins on a GPU machine, from the repository root with
# .dev/pistil and .dev/cuda.test carried (cuda/device_pack.sh): every form's per-op tests
# (bf16, integer, staged) with the launch and programmatic-edge tests (the staged kernels
# enter before the programmatic-launch wait), pistil check on both golden layouts (whole,
# in chunks of 7, decoding from 40, each with PASS on, and decoding from 40 with it off),
# the twins' registers and group memory (nvcc -Xptxas -v), the matrix-vector
# microbenchmark, decode on the full synthetic model with PASS on and off in alternating
# rounds, and (step "variants") tuning variants against the default in alternating rounds:
# VARIANTS is a space-separated list of NAME=ENV entries, ENV environment assignments
# joined by commas (w8=PISTIL_MVM_WARPS=8; a tuning macro: NAME=PISTIL_CUDA_DEFINES=M=V).
# PASS is the form's pass (default staged-matvec; imma-matvec for the integer twins).
# VMICRO_KERNELS are the kernels the variants' microbenchmarks time (default
# matvec_staged_q4). BENCH_ARGS adds flags to every bench (the variants' pass switches),
# CONTEXTS sets its contexts (default 0,4096). STEPS picks (default "tests check regs
# micro bench"). Logs in $OUT; a summary last.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests check regs micro bench}
ROUNDS=${ROUNDS:-2}
PASS=${PASS:-staged-matvec}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
if has tests; then
	(cd cuda && timeout 300 ../.dev/cuda.test -test.v -test.count=1 -test.run \
		'TestStagedMatvec|TestIMMAMatvecKernelsMatchReferences|TestMMAMatvec|TestProgramLaunchesExactlyThePlan|TestProgrammaticEdgesKeepTheAnswer|TestKernelsMatchReferences' \
		> "$OUT/twins_tests.log" 2>&1; echo "cuda.test exit $?" >> "$OUT/twins_tests.log")
	grep -E "^(--- FAIL|FAIL|ok|PASS)|^cuda.test exit|panic" "$OUT/twins_tests.log"
	echo "$(grep -c -- '--- PASS' "$OUT/twins_tests.log") tests and subtests passed, $(grep -c -- '--- FAIL' "$OUT/twins_tests.log") failed"
fi
if has check; then
	for layout in mlx-q4 hf; do
		dir="testdata/golden/tiny-s1/$layout"
		for args in "-pass=$PASS/on" "--chunk 7 -pass=$PASS/on" "--decode-from 40 -pass=$PASS/on" "--decode-from 40 -pass=$PASS/off"; do
			echo "== check $layout $args" >> "$OUT/twins_check.log"
			timeout 120 ./.dev/pistil check --backend cuda --model "$dir" --reference "$dir/reference.safetensors" $args >> "$OUT/twins_check.log" 2>&1
			echo "check $layout $args: exit $? $(grep -E 'max abs' "$OUT/twins_check.log" | tail -1)"
		done
	done
fi
if has regs; then
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	(cd "$OUT" && timeout 200 nvcc -arch=sm_90 -Xptxas -v -c -o /dev/null kernels.cu > ptxas.txt 2>&1; echo "nvcc exit $?")
	awk "/Compiling entry function '(matvec|expert_matvec)_[a-z_]*(mma|imma|staged)_q4'/ { split(\$0, f, \"'\"); name = f[2] }
		name != \"\" && /Used [0-9]+ registers/ { sub(/.*Used /, \"\"); print name \": \" \$0; name = \"\" }" "$OUT/ptxas.txt"
fi
if has vtests; then
	for v in ${VARIANTS:-}; do
		(cd cuda && env $(echo "${v#*=}" | tr "," " ") timeout 200 ../.dev/cuda.test -test.v -test.count=1 -test.run 'TestStagedMatvecKernelsMatchReferences' > "$OUT/twins_vtests_${v%%=*}.log" 2>&1; echo "variant ${v%%=*} tests exit $?: $(grep -c -- '--- PASS' "$OUT/twins_vtests_${v%%=*}.log") passed, $(grep -c -- '--- FAIL' "$OUT/twins_vtests_${v%%=*}.log") failed")
	done
fi
has micro && (cd cuda && timeout 180 ../.dev/cuda.test -test.run '^$' -test.bench MatvecBandwidth -test.benchtime 200x > "$OUT/twins_micro.txt" 2>&1; echo "micro exit $?"; grep -E "copy|Benchmark" "$OUT/twins_micro.txt")
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
B="bench --backend cuda --model /tmp/full --prompts 16 --contexts ${CONTEXTS:-0,4096} --decode-tokens 64 --repeats 3 ${BENCH_ARGS:-}"
run() {
	name=$1; shift
	timeout 150 "$@" > "$OUT/twins_$name.txt" 2>&1
	echo "== $name exit $?"
	grep -E "^decode" "$OUT/twins_$name.txt"
}
if has bench; then
	for round in $(seq 1 "$ROUNDS"); do
		run "on$round" ./.dev/pistil $B -pass=$PASS/on
		run "off$round" ./.dev/pistil $B -pass=$PASS/off
	done
fi
if has variants; then
	for round in $(seq 1 "$ROUNDS"); do
		run "default$round" ./.dev/pistil $B
		for v in ${VARIANTS:-}; do
			run "${v%%=*}$round" env $(echo "${v#*=}" | tr "," " ") ./.dev/pistil $B
		done
	done
fi
if has vmicro; then
	for v in ${VARIANTS:-}; do
		(cd cuda && env $(echo "${v#*=}" | tr "," " ") PISTIL_MATVEC_KERNELS=${VMICRO_KERNELS:-matvec_staged_q4} timeout 120 ../.dev/cuda.test -test.run '^$' -test.bench MatvecBandwidth -test.benchtime 200x > "$OUT/twins_vmicro_${v%%=*}.txt" 2>&1; echo "variant ${v%%=*} micro exit $?"; grep -E "Benchmark" "$OUT/twins_vmicro_${v%%=*}.txt")
	done
fi
