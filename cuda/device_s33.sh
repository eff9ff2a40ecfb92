#!/bin/bash
# The thirty-third session's follow-up call, from the repository root with .dev/r.tar.xz
# (cuda/device_pack_pending.sh) carried and extracted in .dev:
# cuda.test (main, which holds the bf16 products) and pistil-stage / cuda.test-stage (main
# with pending/attn-stage rebased onto it). First the rebased series' attention tests and
# its `pistil check` on both fixtures (whole, chunks of 7, chunks of 64 over a bf16
# cache), then main's tests that the thirty-third session's first call could not run
# (its binary looked for the fixtures under the worktree it was built in).
set -u
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
# count FILE: its tests' pass and fail lines.
count() { echo "pass $(grep -c -- '--- PASS' "$1") fail $(grep -c -- '--- FAIL' "$1")"; }
(cd cuda && timeout 150 ../.dev/r/cuda.test-stage -test.run '^TestPrefillAttention' -test.count=1 -test.v > "$OUT/stage_tests.txt" 2>&1; echo "stage tests exit $? $(count "$OUT/stage_tests.txt")")
for layout in mlx-q4 hf; do M=testdata/golden/tiny-s1/$layout
	for args in "" "--chunk 7" "--chunk 64 --kv-cache bf16 --tolerance bf16-kv"; do
		# The first check compiles every kernel (NVRTC, no cache yet): more than a minute.
		timeout 150 ./.dev/r/pistil-stage check --backend cuda --model $M --reference $M/reference.safetensors $args > "$OUT/c.txt" 2>&1
		echo "stage check $layout $args: $? $(grep -E '^(PASS|FAIL)|^max abs' "$OUT/c.txt" | cut -c1-40 | tr '\n' ' ')" | tee -a "$OUT/stage_checks.txt"
	done
done
T='^(TestProgramLaunchesExactlyThePlan|TestProgrammaticEdgesKeepTheAnswer|TestKernelDefinesKeepTheAnswer|TestOpenCloseDoesNotGrowDeviceMemory|TestSnapshotRestoreOnDevice|TestHandoff.*|TestLongContextOptionsKeepTheAnswer|TestSnapshotSpillToHost)$'
(cd cuda && timeout 200 ../.dev/r/cuda.test -test.run "$T" -test.count=1 -test.v > "$OUT/main_tests.txt" 2>&1; echo "main tests exit $? $(count "$OUT/main_tests.txt")")
