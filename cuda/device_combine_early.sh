#!/bin/bash
# The twentieth session's second measurement, from the repository root with .dev/pistil,
# .dev/cuda.test and .dev/pistil-base carried (cuda/device_pack.sh with BASE=REV): decode
# with the combine's early ids (early-expert-ids) and the GDN's early state loads against
# the base and with the pass off (two rounds alternating), then the per-op tests of the
# kernels changed (gated_delta, conv1d, the combines), the programmatic-edge and early-load
# equality test, TestGrid, and `pistil check --backend cuda` on both fixtures.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
LATE=0 ROUNDS=${ROUNDS:-2} CONTEXTS=${CONTEXTS:-0,4096} SWITCHES=${SWITCHES:-early-expert-ids/off} \
	timeout 300 bash cuda/device_early_loads.sh 2>&1 | tee "$OUT/combine_bench.txt"
(cd cuda && timeout 200 ../.dev/cuda.test -test.count=1 -test.v \
	-test.run 'TestKernelsMatchReferences|TestProgrammaticEdgesKeepTheAnswer|TestGrid|TestStagedMatvec|TestNormMatvec' > "$OUT/combine_tests.txt" 2>&1
echo "cuda.test exit $?: $(grep -cE -- '--- PASS' "$OUT/combine_tests.txt") passed, $(grep -cE -- '--- FAIL' "$OUT/combine_tests.txt") failed, TestGrid shapes passed: $(grep -cE -- '--- PASS: TestGrid/' "$OUT/combine_tests.txt")")
for layout in mlx-q4 hf; do
	dir=testdata/golden/tiny-s1/$layout
	for how in "" "--decode-from 40" "--chunk 1" "--chunk 7" "--decode-from 40 -pass=early-expert-ids/off" "--chunk 1 -pass=fuse-expert-routing/on"; do
		echo "check $layout $how: $(./.dev/pistil check --backend cuda --model $dir --reference $dir/reference.safetensors $how 2>&1 | grep -E 'max abs|PASS|FAIL|rror' | sed 's/ (position.*//' | tr -s ' ' | tr '\n' ' ')"
	done
done
