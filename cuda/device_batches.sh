#!/bin/bash
# The twentieth session's first measurement, from the repository root with .dev/pistil,
# .dev/cuda.test and .dev/pistil-base carried (cuda/device_pack.sh with BASE=REV): the
# staged twins' copies in MVS_BATCHES batches along K (PISTIL_CUDA_DEFINES, the tree's
# default 1) and the tree's early state loads of gated_delta and conv1d, timed against
# the base (decode at 0 and 4,096, two rounds alternating), then the staged twins' and
# the GDN kernels' per-op tests and `pistil check --backend cuda` on the mlx-q4 fixture
# with each batch count.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
DEFINES=${DEFINES:-MVS_BATCHES=2 MVS_BATCHES=4}
LATE=0 ROUNDS=${ROUNDS:-2} CONTEXTS=${CONTEXTS:-0,4096} DEFINES=$DEFINES \
	timeout 420 bash cuda/device_early_loads.sh 2>&1 | tee "$OUT/batches_bench.txt"
dir=testdata/golden/tiny-s1/mlx-q4
for d in "" $DEFINES; do
	echo "== defines '$d'"
	(cd cuda && PISTIL_CUDA_DEFINES="${d//,/ }" timeout 120 ../.dev/cuda.test -test.count=1 -test.v \
		-test.run 'TestStagedMatvec|TestNormMatvec|TestKernelsMatchReferences|TestProgrammaticEdgesKeepTheAnswer' > "$OUT/batches_tests_${d//[=,]/_}.txt" 2>&1
	echo "cuda.test exit $?: $(grep -cE -- '--- PASS' "$OUT/batches_tests_${d//[=,]/_}.txt") passed, $(grep -cE -- '--- FAIL' "$OUT/batches_tests_${d//[=,]/_}.txt") failed")
	for how in "--decode-from 40" "--chunk 1" "--chunk 7"; do
		echo "check $how: $(PISTIL_CUDA_DEFINES="${d//,/ }" ./.dev/pistil check --backend cuda --model $dir --reference $dir/reference.safetensors $how 2>&1 | grep -E 'max abs|PASS|FAIL|rror' | tr '\n' ' ')"
	done
done
