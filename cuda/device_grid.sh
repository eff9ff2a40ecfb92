#!/bin/bash
# The differential shape grid (verify/grid.Shapes) on a GPU machine, from the repository
# root, with the test binary carried in .dev/ (see cuda/README.md):
#   CGO_ENABLED=0 go test -c -o .dev/cuda.test ./cuda
#   bash cuda/device_grid.sh          # every shape, default pipeline (a few minutes)
#   bash cuda/device_grid.sh bisect   # where a failure comes from (see below)
# Every shape is written with synth into the test's temporary folder, its prompt run on
# the CPU backend (the reference) and on CUDA whole, in chunks of 1, 7 and 64 and through
# decode. Logs go to $OUT (the device tool's output folder) or /tmp/cuda-out; the exit
# status is the first run's (0: every shape and path within tolerance).
set -u
# The golden fixtures of this copy of the tree: a test binary built elsewhere (a
# throwaway worktree) would look for them where it was built.
export PISTIL_TESTDATA=${PISTIL_TESTDATA:-$PWD/testdata}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
grid() { # grid LOG [test.run pattern]
	local log=$1 run=${2:-TestGrid}
	echo "== grid $run ${PISTIL_GRID_PIPELINE:+pipeline $PISTIL_GRID_PIPELINE} ${PISTIL_GRID_PASSES:+passes $PISTIL_GRID_PASSES}" | tee -a "$OUT/grid_summary.txt"
	(cd cuda && ../.dev/cuda.test -test.run "$run" -test.v -test.count=1 -test.timeout 9m 2>&1) | tee "$OUT/$log" |
		grep -E "(PASS|FAIL)$|^(--- |ok|FAIL|PASS)|panic|rror" | sed 's/^ *grid_test.go:[0-9]*: //' | tee -a "$OUT/grid_summary.txt"
	return "${PIPESTATUS[0]}"
}
if [ "${1:-}" != bisect ]; then
	# Every shape with the default pipeline (every fusion pass on, CUDA graphs on).
	grid grid.log
	exit $?
fi
# Bisection on issue 10's shape (MLX 4-bit) and the small shapes: graphs off (kernels
# launched one by one in plan order: passing here and failing above is a race between
# graph nodes), every optional pass off (the plans of primitive ops), then issue 10's
# shape with each fusion pass off alone (a fused kernel that is wrong passes only with
# its pass off; split-attention and reorder too).
sed 's/^graphs = true/graphs = false/' pipeline.toml > /tmp/nographs.toml
PISTIL_GRID_PIPELINE=/tmp/nographs.toml grid grid_nographs.log 'TestGrid/(issue10|h64|h128)'
status=$?
PISTIL_GRID_PASSES=all/off grid grid_O0.log 'TestGrid/(issue10|h64|h128)'
for pass in fuse-gdn-gates fuse-conv-silu fuse-slice-l2 fuse-norm-out-proj fuse-qk-norm-rope fuse-attn-gate \
	fuse-swiglu fuse-router fuse-moe-combine fuse-shared-gate fuse-shared-expert fuse-expert-routing fuse-projections fuse-add-norm split-attention reorder; do
	PISTIL_GRID_PASSES=$pass/off grid "grid_$pass-off.log" 'TestGrid/issue10/mlx-q4'
done
exit $status
