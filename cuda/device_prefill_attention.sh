#!/bin/bash
# Prefill attention on the tensor cores (mma-attention, attention_prefill_mma) on a GPU
# machine, from the repository root with .dev/pistil and .dev/cuda.test carried
# (cuda/device_pack.sh), and optionally OLD=path/to/another/pistil to time against.
# STEPS picks (default "tests regs check bench"):
#  tests:   the per-op cases (every prefill attention test, the decode kernel's beside it,
#           the kernels' references, the launch test);
#  regs:    registers and spills of attention_prefill_mma (nvcc -Xptxas -v);
#  check:   pistil check on both golden layouts, whole, --chunk 7 and 32, --decode-from 40,
#           whole with the pass off, and whole and --chunk 7 with a bf16 cache;
#  bench:   prefill of PROMPTS (default 512,4096) at depth 0 and of 4,096 tokens on top of
#           DEPTH (default 32768), float32 and bf16 caches, and decode at 32,768 with a bf16
#           cache, 3 repeats: this tree with the pass on and
#           off, and OLD when given (VARIANTS picks among "new off old"), ROUNDS rounds
#           (default 1);
#  profile: Nsight Compute on attention_prefill_mma in the last 1,024-token chunk of an
#           8,192-token prompt (cuda/device_stalls.sh; launches 71-73 of 80).
# Logs in $OUT; each step prints a summary.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests regs check bench}
ROUNDS=${ROUNDS:-1}
PROMPTS=${PROMPTS:-512,4096}
DEPTH=${DEPTH:-32768}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
if has tests; then
	run_tests "$OUT/pa_tests.txt" 400 '^(TestPrefillAttention.*|TestDecodeAttentionMMA|TestAttentionVariants|TestKernelsMatchReferences|TestProgramLaunchesExactlyThePlan)$'
fi
if has regs; then
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	(cd "$OUT" && timeout 200 nvcc -arch=sm_90 -Xptxas -v -c -o /dev/null kernels.cu > ptxas.txt 2>&1; echo "nvcc exit $?")
	grep -A3 -E "entry function '(attention_prefill_mma|attention_gqa_mma)'" "$OUT/ptxas.txt" | grep -E "entry|registers|spill"
fi
if has check; then
	for layout in mlx-q4 hf; do
		M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 7" "--chunk 32" "--decode-from 40" "-pass=mma-attention/off" \
			"--kv-cache bf16 --tolerance bf16-kv" "--chunk 7 --kv-cache bf16 --tolerance bf16-kv"; do
			echo "== $layout $args" >> "$OUT/pa_check.txt"
			timeout 120 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors $args >> "$OUT/pa_check.txt" 2>&1
			echo "$layout $args: exit $? $(grep -E '^max abs error' "$OUT/pa_check.txt" | tail -1)"
		done
	done
	echo "check: $(grep -c '^PASS' "$OUT/pa_check.txt") PASS, $(grep -c '^FAIL' "$OUT/pa_check.txt") FAIL"
fi
if has bench; then
	B="bench --backend cuda --model /tmp/full --contexts= --repeats 3 --bandwidth-mib 0"
	for round in $(seq "$ROUNDS"); do
		for v in ${VARIANTS:-new off old}; do
			bin=./.dev/pistil sw=""
			[ $v = off ] && sw="-pass=mma-attention/off"
			if [ $v = old ]; then [ -n "${OLD:-}" ] || continue; bin=$OLD; fi
			echo "== round $round $v"
			timeout 250 $bin $B --prompts "$PROMPTS" --depths 0 $sw > "$OUT/pa_bench_${round}_$v.txt" 2>&1
			timeout 250 $bin $B --prompts 4096 --depths "$DEPTH" $sw >> "$OUT/pa_bench_${round}_$v.txt" 2>&1
			# A bf16 cache: prefill at depth, and decode at 32,768 (attention_gqa_mma's two-mma products).
			timeout 250 $bin $B --prompts 4096 --depths "$DEPTH" --kv-cache bf16 $sw >> "$OUT/pa_bench_${round}_$v.txt" 2>&1
			timeout 200 $bin $B --prompts= --contexts 32768 --decode-tokens 64 --kv-cache bf16 >> "$OUT/pa_bench_${round}_$v.txt" 2>&1
			grep -E "^(prefill|decode)" "$OUT/pa_bench_${round}_$v.txt"
		done
	done
fi
if has profile; then
	KERNELS='regex:^attention_prefill_mma$' PROMPT=8192 SKIP=70 COUNT=3 timeout 300 bash cuda/device_stalls.sh > "$OUT/pa_profile.txt" 2>&1
	echo "profile exit $?"
	grep -E "Duration|Registers Per|Achieved Occ|Issued Warp|Eligible Warps|Local Memory Spilling Requests|long_scoreboard|short_scoreboard|_wait_|barrier|mio_throttle|math_pipe" "$OUT/pa_profile.txt" | head -40
fi
