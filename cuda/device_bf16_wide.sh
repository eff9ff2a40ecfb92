#!/bin/bash
# Decode attention over a bf16 cache with 16-byte loads (AD_BF16_WIDE, ops/kernels/
# attention_mma.k) on a GPU machine, from the repository root with .dev/pistil and
# .dev/cuda.test carried (cuda/device_pack.sh). STEPS picks (default "tests bench"; "regs" too when asked):
#  tests: the decode attention kernels' per-op cases and the long-context options'
#         golden check (cuda.test);
#  bench: decode of 64 tokens at CONTEXTS (default 0,4096,32768), medians of 3, over a
#         bf16 cache with the wide loads (the default) and without (AD_BF16_WIDE=0)
#         alternating, ROUNDS rounds (default 2), then once over a float32 cache (the
#         kernel's float32 path, unchanged);
#  regs:  attention_gqa_mma's registers and spills (nvcc -Xptxas -v), both ways.
# The full synthetic model is made in /tmp/full while the tests run. Logs in $OUT.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
CONTEXTS=${CONTEXTS:-0,4096,32768}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-tests bench}
has() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT"
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if has bench && [ ! -f /tmp/full/config.json ]; then
	./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1 &
	synth=$!
fi
if has tests; then
	run_tests "$OUT/wide_tests.txt" 300 '^(TestDecodeAttentionMMA|TestDecodeAttentionStaged|TestLongContextOptionsKeepTheAnswer)$'
fi
if has bench; then
	[ -n "${synth:-}" ] && wait "$synth"
	for round in $(seq "$ROUNDS"); do
		order="wide narrow"
		[ $((round % 2)) = 0 ] && order="narrow wide"
		for v in $order; do
			defines=""
			[ "$v" = narrow ] && defines="AD_BF16_WIDE=0"
			PISTIL_CUDA_DEFINES="$defines" decode_bench "round $round bf16 cache, $v" "$OUT/wide_${round}_$v.txt" 240 "$CONTEXTS" .dev/pistil --kv-cache bf16
		done
	done
	decode_bench "float32 cache" "$OUT/wide_f32.txt" 240 "$CONTEXTS" .dev/pistil
fi
if has regs; then
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	for d in default AD_BF16_WIDE=0; do
		flags=()
		[ "$d" = default ] || flags=("-D$d")
		(cd "$OUT" && timeout 200 nvcc -arch=sm_90 -Xptxas -v "${flags[@]}" -c -o /dev/null kernels.cu > "ptxas_$d.txt" 2>&1; echo "nvcc $d exit $?")
		grep -A3 -E "entry function 'attention_gqa_mma'" "$OUT/ptxas_$d.txt" | grep -E "entry|registers|spill"
	done
fi
