#!/bin/bash
# The machine code of decode kernels and what they execute, on a GPU machine, from the
# repository root with .dev/pistil carried (cuda/device_pack.sh): each kernel of
# SASS_KERNELS (space-separated; default the staged matrix-vector twins) as SASS
# (nvcc -cubin, cuobjdump -sass) into $OUT/sass_NAME.txt with its opcode counts, and
# Nsight Compute's instruction statistics and sampled stall locations for the first
# launch of each in a decode step of the full synthetic model after SKIP launches (graphs
# off). What a kernel spends its instructions on, where a stall profile says only that
# it is issue- or latency-bound. PROMPT (default 1 token) sets the prompt's length, for
# prefill kernels: SASS_KERNELS=attention_prefill_mma PROMPT=8192 SKIP=70 reads the last
# 1,024-token chunk's attention (launches 71-73 of 80).
set -u
PROMPT=${PROMPT:-1}
OUT=${OUT:-/tmp/cuda-out}
SKIP=${SKIP:-60}
SASS_KERNELS=${SASS_KERNELS:-matvec_fused_staged_q4 matvec_staged_q4 expert_matvec_swiglu_shared_staged_q4}
mkdir -p "$OUT"
./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
(cd "$OUT" && timeout 240 nvcc -arch=sm_90 -cubin -o kernels.cubin kernels.cu; echo "nvcc exit $?")
for k in $SASS_KERNELS; do
	cuobjdump -sass -fun "$k" "$OUT/kernels.cubin" > "$OUT/sass_$k.txt" 2>&1
	echo "== $k: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$OUT/sass_$k.txt") instructions; opcodes:"
	grep -oE '^ +/\*[0-9a-f]{4}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_.]+' "$OUT/sass_$k.txt" | awk '{print $NF}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '
	echo
done
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
printf '[cuda]\ngraphs = false\n' > /tmp/nographs.toml
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
regex=$(echo "$SASS_KERNELS" | sed 's/ /|/g')
timeout 300 "$NCU" --clock-control none -k "regex:^($regex)\$" --launch-skip "$SKIP" --launch-count 3 \
	--section InstructionStats --section SourceCounters --section WarpStateStats \
	--metrics smsp__inst_executed.sum,smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_shared_st.sum,smsp__sass_inst_executed_op_global_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
	./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml --prompt-ids "$(python3 -c "print(','.join(str(1 + i % 200000) for i in range($PROMPT)))")" --max-tokens 8 \
	> "$OUT/sass_ncu.txt" 2> "$OUT/sass_ncu_err.txt"
echo "ncu exit $?"
