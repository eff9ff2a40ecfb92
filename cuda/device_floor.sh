#!/bin/bash
# Where a decode step's time goes, from the repository root with .dev/pistil carried: the
# full synthetic model's decode timed with every kernel body, with none (PZ_SKIP_KERNELS="*":
# the launches, grids and dependencies alone, the floor a plan's stages set), and with one
# family of kernels at a time compiled as its entry alone (ops/kernels/prelude_cuda.h). The
# differences say what each family adds to a step beyond its stages. Decode answers are
# garbage in the skipping runs; only their time means anything, and not all of it: once
# the garbage reaches the router as NaN every token takes experts 0-7, whose weights lie
# side by side, so the experts' reads change too (cuda/device_repeat.sh times a body
# without that: twenty-fifth session, cuda/README.md).
# SKIP_SETS overrides the families (name=kernel,kernel ...), ROUNDS the rounds (2), CONTEXTS
# the decode contexts (0,4096). Logs in $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
B="bench --backend cuda --model /tmp/full --prompts 16 --contexts ${CONTEXTS:-0,4096} --decode-tokens 64 --repeats 3"
SMALL=rms_norm,l2_norm,slice,gdn_gates,gated_rms_norm,rope,kv_append,embed,matvec_q8,router
# The weight-reading kernels in each form of the twins (bf16, staged) and the down projections.
DENSE=matvec_fused_mma_q4,matvec_mma_q4,matvec_fused_staged_q4,matvec_staged_q4
EXPERTS=expert_matvec_swiglu_shared_mma_q4,expert_matvec_swiglu_shared_staged_q4
DOWN=expert_matvec_combine_shared_q4
STATE=gated_delta,conv1d,attention_gqa,attention_gqa_mma,attention_merge
SKIP_SETS=${SKIP_SETS:-all=* small=$SMALL heavy=$DENSE,$EXPERTS,$DOWN dense=$DENSE experts=$EXPERTS down=$DOWN state=$STATE}
run() {
	name=$1 skip=$2
	if [ -z "$skip" ]; then
		timeout 150 ./.dev/pistil $B > "$OUT/floor_$name.txt" 2>&1
	else
		PISTIL_CUDA_DEFINES="PZ_SKIP_KERNELS=\"$skip\"" timeout 150 ./.dev/pistil $B > "$OUT/floor_$name.txt" 2>&1
	fi
	echo "== $name exit $? (skipped: ${skip:-none})"
	grep -E "^decode" "$OUT/floor_$name.txt"
}
for round in $(seq 1 "${ROUNDS:-2}"); do
	run "full$round" ""
	for s in $SKIP_SETS; do run "${s%%=*}$round" "${s#*=}"; done
done
