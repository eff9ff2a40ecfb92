#!/bin/bash
# Why a decode kernel runs below the copy bandwidth, on a GPU machine, from the repository
# root with .dev/pistil carried: Nsight Compute's warp-state, scheduler, occupancy and
# memory sections for the first launches of the kernels matching KERNELS (a regular
# expression; default the q4 matrix-vector twins and the experts' down projection) in a
# decode step of the full synthetic model (graphs off). The stall reasons say whether a
# kernel waits on memory (long scoreboard), on issue (the scheduler's eligible warps), or
# on too few warps (occupancy). Logs go to $OUT.
#   KERNELS='regex:matvec_mma_q4' COUNT=2 cuda/device_stalls.sh
# PROMPT sets the prompt's length (default 1 token) and SKIP the launches skipped (default
# 200): a prefill kernel's first launches are the first chunk's,
#   KERNELS='regex:expert_mma' PROMPT=512 SKIP=0 COUNT=3 cuda/device_stalls.sh
set -u
PROMPT=${PROMPT:-1}
SKIP=${SKIP:-200}
OUT=${OUT:-/tmp/cuda-out}
KERNELS=${KERNELS:-regex:_mma_q4|expert_matvec_combine_shared_q4}
COUNT=${COUNT:-8}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
printf '[cuda]\ngraphs = false\n' > /tmp/nographs.toml
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# Each stall reason's warps per issued instruction (what the WarpStateStats section charts).
STALLS=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard short_scoreboard \
	barrier membar mio_throttle lg_throttle wait math_pipe_throttle not_selected selected no_instruction drain \
	dispatch_stall imc_miss branch_resolving sleeping tex_throttle misc | sed 's/,$//')
ids=$(python3 -c "print(','.join(str(1 + i % 200000) for i in range($PROMPT)))")
# By default skip the prompt and the first decode steps' launches of these kernels (load
# and warm-up).
timeout 500 "$NCU" --clock-control none -k "$KERNELS" --launch-skip "$SKIP" --launch-count "$COUNT" \
	--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
	--section MemoryWorkloadAnalysis --section LaunchStats --metrics "$STALLS" \
	./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml --prompt-ids "$ids" --max-tokens 24 \
	> "$OUT/stalls.txt" 2> "$OUT/stalls_err.txt"
echo "ncu exit $?"
grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Eligible Warps|Issued Warp|No Eligible|Stall|Warp Cycles Per Issued|issue_stalled" "$OUT/stalls.txt" | head -150
