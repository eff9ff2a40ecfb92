#!/bin/bash
# Why a decode kernel runs below the copy bandwidth, on a GPU machine, from the repository
# root with .dev/pistil carried: Nsight Compute's warp-state, scheduler, occupancy and
# memory sections for the first launches of the kernels matching KERNELS (a regular
# expression; default the q4 matrix-vector twins and the experts' down projection) in a
# decode step of the full synthetic model (graphs off). The stall reasons say whether a
# kernel waits on memory (long scoreboard), on issue (the scheduler's eligible warps), or
# on too few warps (occupancy). Logs go to $OUT.
#   KERNELS='regex:matvec_mma_q4' COUNT=2 cuda/device_stalls.sh
set -u
OUT=${OUT:-/tmp/cuda-out}
KERNELS=${KERNELS:-regex:_mma_q4|expert_matvec_combine_shared_q4}
COUNT=${COUNT:-8}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
printf '[cuda]\ngraphs = false\n' > /tmp/nographs.toml
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# Skip the prompt and the first decode steps' launches of these kernels (load and warm-up).
timeout 500 "$NCU" --clock-control none -k "$KERNELS" --launch-skip 200 --launch-count "$COUNT" \
	--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
	--section MemoryWorkloadAnalysis --section LaunchStats \
	./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml --prompt-ids 1 --max-tokens 24 \
	> "$OUT/stalls.txt" 2> "$OUT/stalls_err.txt"
echo "ncu exit $?"
grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Eligible Warps|Issued Warp|No Eligible|Stall|Warp Cycles Per Issued" "$OUT/stalls.txt" | head -150
