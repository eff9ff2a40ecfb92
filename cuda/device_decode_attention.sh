#!/bin/bash
# Decode attention on the tensor cores (mma-decode-attention, attention_gqa_mma) on a GPU
# machine, from the repository root with .dev/pistil and .dev/cuda.test carried
# (cuda/device_pack.sh). STEPS picks (default "tests regs check bench"):
#  tests: the per-op cases (TestDecodeAttentionMMA, TestAttentionVariants, the lowering);
#  regs:  registers and spills of attention_gqa_mma and attention_gqa (nvcc -Xptxas -v),
#         with the defaults and each of REGS_DEFINES (e.g. "AD_CHAINS=2 AD_CHAINS=4");
#  check: pistil check on both golden layouts, whole, --chunk 7, --decode-from 40, with
#         the pass on and off, a bf16 cache, and decode's fixed-block split from 48 keys;
#  bench: decode at CONTEXTS (default 0,4096,32768), 64 tokens, 3 repeats, the pass on and
#         off alternating, ROUNDS rounds (default 2), then (unless BF16=0) a bf16 cache at
#         32,768 on and off;
#         VARIANTS="name=DEFINES ..." adds, each round, the pass on with PISTIL_CUDA_DEFINES
#         set to DEFINES (commas between defines), e.g. "unrolled=AD_FULL_UNROLL=1".
# Logs in $OUT; each step prints a summary.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests regs check bench}
ROUNDS=${ROUNDS:-2}
CONTEXTS=${CONTEXTS:-0,4096,32768}
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
if has tests; then
	run_tests "$OUT/da_tests.txt" 300 '^(TestDecodeAttentionMMA|TestAttentionVariants|TestKernelsMatchReferences|TestProgramLaunchesExactlyThePlan|TestProgrammaticEdgesKeepTheAnswer|TestLongContextOptionsKeepTheAnswer)$'
fi
if has regs; then
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	# REGS_DEFINES (space-separated; commas join several) compiles each variant too.
	for d in default ${REGS_DEFINES:-}; do
		flags=()
		[ "$d" = default ] || for x in ${d//,/ }; do flags+=("-D$x"); done
		(cd "$OUT" && timeout 200 nvcc -arch=sm_90 -Xptxas -v "${flags[@]}" -c -o /dev/null kernels.cu > "ptxas_$d.txt" 2>&1; echo "nvcc $d exit $?")
		grep -A3 -E "entry function '(attention_gqa_mma|attention_gqa)'" "$OUT/ptxas_$d.txt" | grep -E "entry|registers|spill"
	done
fi
if has check; then
	printf '[attention]\nkey_block_split_from = 48\nkey_block_keys = 16\n' > /tmp/blocks48.toml
	for layout in mlx-q4 hf; do
		M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 7" "--decode-from 40" "--decode-from 40 -pass=mma-decode-attention/off" \
			"--decode-from 40 --kv-cache bf16 --tolerance bf16-kv" "--decode-from 40 --pipeline /tmp/blocks48.toml"; do
			echo "== $layout $args" >> "$OUT/da_check.txt"
			timeout 120 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors $args >> "$OUT/da_check.txt" 2>&1
			echo "$layout $args: exit $? $(grep -E '^max abs error' "$OUT/da_check.txt" | tail -1)"
		done
	done
	echo "check: $(grep -c '^PASS' "$OUT/da_check.txt") PASS, $(grep -c '^FAIL' "$OUT/da_check.txt") FAIL"
fi
if has bench; then
	B="bench --backend cuda --model /tmp/full --prompts= --decode-tokens 64 --repeats 3"
	for round in $(seq "$ROUNDS"); do
		for v in on off; do
			echo "== round $round mma-decode-attention $v contexts $CONTEXTS"
			timeout 280 ./.dev/pistil $B --contexts "$CONTEXTS" -pass=mma-decode-attention/$v > "$OUT/da_bench_${round}_$v.txt" 2>&1
			grep -E "^decode" "$OUT/da_bench_${round}_$v.txt"
		done
		for var in ${VARIANTS:-}; do
			echo "== round $round mma-decode-attention on, ${var%%=*} (${var#*=}) contexts $CONTEXTS"
			PISTIL_CUDA_DEFINES="${var#*=}" timeout 280 ./.dev/pistil $B --contexts "$CONTEXTS" > "$OUT/da_bench_${round}_${var%%=*}.txt" 2>&1
			grep -E "^decode" "$OUT/da_bench_${round}_${var%%=*}.txt"
		done
	done
	[ "${BF16:-1}" = 1 ] && for v in on off; do
		echo "== bf16 cache mma-decode-attention $v at 32768"
		timeout 200 ./.dev/pistil $B --contexts 32768 --kv-cache bf16 -pass=mma-decode-attention/$v > "$OUT/da_bench_bf16_$v.txt" 2>&1
		grep -E "^decode" "$OUT/da_bench_bf16_$v.txt"
	done
fi
