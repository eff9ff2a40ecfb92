#!/bin/bash
# Thirty-second session: two prefill attention changes on a GPU, and the prefill chunk
# swept again. (Both are merged now: bf16-products in the thirty-third session and
# attn-stage in the thirty-fourth, so "bm" and "stage" are main; a later variant's
# binaries go in as .dev/pistil-NAME and .dev/cuda.test-NAME with VARIANTS=NAME.) From
# the repository root with the binaries extracted in .dev (then): pistil and cuda.test of main with pending/bf16-products (the bf16
# products over a bf16 cache, AM_BF16_MMA: "bm" below; cuda/device_check.sh runs them
# whole), pistil-main (main), and pistil-stage and cuda.test-stage (main with
# pending/attn-stage). Steps (STEPS,
# default "depth tests"):
#  depth: 4,096 tokens prefilled on top of 32,768 (REPEATS repeats, 2): main and stage with the
#         float32 cache, main and bm with a bf16 cache, alternating, ROUNDS rounds (2);
#  tests: each variant's TestPrefillAttention* and `pistil check --backend cuda` on both
#         fixtures whole and in chunks of 7 (float32 cache) and 64 (bf16 cache);
#  grid:  the tree's TestGrid at head dim 256 (h64-d256, h256-gqa8, h2048-real) with a bf16
#         cache on both sides, AM_BF16_MMA 1 and 0;
#  empty: prefill 512 / 4,096 at an empty context, main, stage, main bf16 and bm bf16;
#  decode: main's decode at 0 / 4,096 / 32,768 (64 tokens, 3 repeats) with a float32 and
#         a bf16 cache (issue 10's table; the bf16 cache halves attention's reads);
#  chunk: main's prefill of 4,096 tokens with chunks of 1,024, 2,048 and 4,096 (the
#         eighth session's sweep put 1,024 first, before the tensor-core GEMMs), then
#         4,096 on top of 32,768 in chunks of 2,048.
# Logs go to $OUT (stage_*.txt, chunk.txt); each step prints its lines.
set -u
# The golden fixtures of this copy of the tree: a test binary built elsewhere (a
# throwaway worktree) would look for them where it was built.
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
STEPS=${STEPS:-depth tests}
VARIANTS=${VARIANTS:-stage bm}
ROUNDS=${ROUNDS:-2}
has() { [[ " $STEPS " == *" $1 "* ]]; }
# The full model, for the steps that time it (tests and grid need none: the thirty-second
# session's device_s32.sh made it in the background while they ran, and a second synth
# here would have raced it).
if has depth || has empty || has decode || has chunk; then
	[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
fi
D="bench --backend cuda --model /tmp/full --prompts 4096 --depths 32768 --contexts= --repeats ${REPEATS:-2}"
E="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3"
# run NAME BINARY ARGS...: one bench, its prefill lines.
run() { local name=$1 bin=$2; shift 2; echo "== $name"; timeout 120 ./.dev/$bin "$@" 2>&1 | tee -a "$OUT/stage_bench.txt" | grep -E '^prefill'; }
# bin VARIANT: the binaries' suffix (the tree's, bm, have none).
bin() { [ "$1" = bm ] || echo "-$1"; }
has depth && for r in $(seq "$ROUNDS"); do
	for v in $VARIANTS; do
		kv=""
		[ "$v" = bm ] && kv="--kv-cache bf16" # the bf16 products run only over a bf16 cache
		run "round $r main depth $kv" pistil-main $D $kv; run "round $r $v depth $kv" pistil$(bin $v) $D $kv
	done
done
has tests && for v in $VARIANTS; do
	(cd cuda && timeout 300 ../.dev/cuda.test$(bin $v) -test.run '^TestPrefillAttention' -test.count=1 -test.v > "$OUT/${v}_tests.txt" 2>&1; echo "$v tests exit $? pass $(grep -c -- '--- PASS' "$OUT/${v}_tests.txt") fail $(grep -c -- '--- FAIL' "$OUT/${v}_tests.txt")")
	for layout in mlx-q4 hf; do M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 7" "--chunk 64 --kv-cache bf16 --tolerance bf16-kv"; do
			timeout 60 ./.dev/pistil$(bin $v) check --backend cuda --model $M --reference $M/reference.safetensors $args > /tmp/c.txt 2>&1
			echo "$v check $layout $args: $? $(grep -E '^(PASS|FAIL)|^max abs' /tmp/c.txt | cut -c1-40 | tr '\n' ' ')" | tee -a "$OUT/${v}_checks.txt"
		done
	done
done
has grid && {
	sed 's/^# kv_cache = "bf16"/kv_cache = "bf16"/' pipeline.toml > /tmp/bf16kv.toml
	for products in 1 0; do
		(cd cuda && PISTIL_CUDA_DEFINES=AM_BF16_MMA=$products PISTIL_GRID_PIPELINE=/tmp/bf16kv.toml timeout 240 ../.dev/cuda.test -test.run 'TestGrid/(h64-d256|h256-gqa8|h2048-real)' -test.count=1 -test.v > "$OUT/grid_bf16kv_$products.txt" 2>&1
		echo "grid bf16 kv AM_BF16_MMA=$products exit $? pass $(grep -c -- '--- PASS: TestGrid/' "$OUT/grid_bf16kv_$products.txt") fail $(grep -c -- '--- FAIL' "$OUT/grid_bf16kv_$products.txt")")
	done
}
has empty && {
	run "main empty" pistil-main $E; run "stage empty" pistil-stage $E
	run "main bf16 empty" pistil-main $E --kv-cache bf16; run "bm bf16 empty" pistil $E --kv-cache bf16
}
has decode && for kv in f32 bf16; do
	echo "== decode $kv"; timeout 200 ./.dev/pistil-main bench --backend cuda --model /tmp/full --prompts= --contexts 0,4096,32768 --decode-tokens 64 --repeats 3 --bandwidth-mib 0 --kv-cache $kv 2>&1 | tee -a "$OUT/stage_bench.txt" | grep -E '^decode'
done
has chunk && {
	for c in 1024 2048 4096; do run "chunk $c" pistil-main bench --backend cuda --model /tmp/full --prompts 4096 --contexts= --repeats 3 --chunk $c; done
	run "chunk 2048 depth" pistil-main $D --chunk 2048
}
