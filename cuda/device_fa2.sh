#!/bin/bash
# Prefill attention with whole rows a warp (fa2-attention, attention_prefill_fa2, on by
# default since the thirty-fifth session) on a GPU machine, from the repository root with .dev/pistil and .dev/cuda.test
# carried (cuda/device_pack.sh). STEPS picks (default "tests regs check bench"):
#  tests:  the prefill attention cases (TestPrefillAttentionFA2 and the others beside it)
#          and the golden fixtures' long-context options (TestLongContextOptionsKeepTheAnswer:
#          fa2 over a bf16 cache whole and in chunks of 7);
#  regs:   registers and spills of attention_prefill_fa2 and attention_prefill_mma (nvcc
#          -Xptxas -v on `pistil kernels --backend cuda`);
#  check:  pistil check on both golden layouts over a bf16 cache with the pass on: whole,
#          --chunk 7, --chunk 32, --decode-from 40;
#  bench:  prefill over a bf16 cache of PROMPTS (default 512,4096) at depth 0 and of 4,096
#          tokens on top of DEPTH (default 32768), 3 repeats, the pass on, off and on with
#          single products (FA_SPLIT=0) alternating (VARIANTS), ROUNDS rounds (default 2).
# The check step also runs the single products (FA_SPLIT=0) whole and in chunks of 7.
# Logs in $OUT; each step prints a summary.
set -u
. "$(dirname "$0")/device_lib.sh"
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests regs check bench}
ROUNDS=${ROUNDS:-2}
PROMPTS=${PROMPTS:-512,4096}
DEPTH=${DEPTH:-32768}
has() { [[ " $STEPS " == *" $1 "* ]]; }
sed 's/^# kernel_defines = .*/kernel_defines = ["FA_SPLIT=0"]/' pipeline.toml > /tmp/fa2single.toml
grep -q '^kernel_defines = \["FA_SPLIT=0"\]' /tmp/fa2single.toml || { echo "pipeline.toml has no kernel_defines example"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# The CPU-only work starts first, beside the GPU steps: the full synthetic model for the
# bench and nvcc's register counts.
if has bench && [ ! -f /tmp/full/config.json ]; then
	./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1 &
	synth=$!
fi
if has regs; then
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	(cd "$OUT" && timeout 300 nvcc -arch=sm_90 -Xptxas -v -c -o /dev/null kernels.cu > ptxas.txt 2>&1; echo "nvcc exit $?" >> ptxas.txt) &
	regs=$!
fi
if has tests; then
	run_tests "$OUT/fa2_tests.txt" 400 '^(TestPrefillAttention.*|TestLongContextOptionsKeepTheAnswer)$'
fi
if has check; then
	for layout in mlx-q4 hf; do
		M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 7" "--chunk 32" "--decode-from 40"; do
			echo "== $layout $args" >> "$OUT/fa2_check.txt"
			timeout 120 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors \
				-pass=fa2-attention/on --kv-cache bf16 --tolerance bf16-kv $args >> "$OUT/fa2_check.txt" 2>&1
			echo "$layout $args: exit $? $(grep -E '^max abs error' "$OUT/fa2_check.txt" | tail -1)"
		done
		for args in "" "--chunk 7"; do
			echo "== $layout single $args" >> "$OUT/fa2_check.txt"
			timeout 120 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors --pipeline /tmp/fa2single.toml \
				-pass=fa2-attention/on --kv-cache bf16 --tolerance bf16-kv $args >> "$OUT/fa2_check.txt" 2>&1
			echo "$layout single $args: exit $? $(grep -E '^max abs error' "$OUT/fa2_check.txt" | tail -1)"
		done
	done
	echo "check: $(grep -c '^PASS' "$OUT/fa2_check.txt") PASS, $(grep -c '^FAIL' "$OUT/fa2_check.txt") FAIL"
fi
if has regs; then
	wait "$regs"
	grep "nvcc exit" "$OUT/ptxas.txt"
	grep -A3 -E "entry function '(attention_prefill_fa2|attention_prefill_mma)'" "$OUT/ptxas.txt" | grep -E "entry|registers|spill"
fi
if has bench; then
	[ -n "${synth:-}" ] && wait "$synth"
	B="bench --backend cuda --model /tmp/full --contexts= --repeats 3 --bandwidth-mib 0 --kv-cache bf16"
	for round in $(seq "$ROUNDS"); do
		for v in ${VARIANTS:-on off single}; do
			echo "== round $round fa2 $v"
			log="$OUT/fa2_bench_${round}_$v.txt"
			sw="-pass=fa2-attention/$v"
			[ $v = single ] && sw="-pass=fa2-attention/on --pipeline /tmp/fa2single.toml"
			timeout 250 ./.dev/pistil $B --prompts "$PROMPTS" --depths 0 $sw > "$log" 2>&1
			timeout 250 ./.dev/pistil $B --prompts 4096 --depths "$DEPTH" $sw >> "$log" 2>&1
			grep -E "^prefill|rror" "$log"
		done
	done
fi
