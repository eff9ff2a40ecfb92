#!/bin/bash
# attention_prefill_mma with D and the cache type compiled in and its fragments read in
# place (thirty-first session; ran on an H100, cuda/README.md "Prefill attention with the
# head dim compiled in") against the base binary (the session's: BASE=c9a6e5b), from the
# repository root with cuda/device_pack.sh's BASE pack extracted in .dev: prefill of
# 4,096 tokens on top of 32,768 with the base and the tree alternating (two rounds; both
# with MMA_F16=0, so the attention alone differs), prefill 512 / 4,096 with MMA_F16 0 and
# 1 on the tree, then the SASS and Nsight Compute's source counters of
# attention_prefill_mma in the last chunk of an 8,192-token prompt (cuda/device_sass.sh).
# STEPS picks them (default "depth f16 sass"). Logs go to $OUT.
set -u
STEPS=${STEPS:-depth f16 sass}
has() { [[ " $STEPS " == *" $1 "* ]]; }
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
D="bench --backend cuda --model /tmp/full --prompts 4096 --depths 32768 --contexts= --repeats 2"
has depth && for r in 1 2; do
	echo "== round $r base"; timeout 60 ./.dev/pistil-base $D --pipeline .dev/pipeline-base.toml 2>&1 | tee -a "$OUT/lean_depth.txt" | grep -E '^prefill'
	echo "== round $r lean"; PISTIL_CUDA_DEFINES=MMA_F16=0 timeout 60 ./.dev/pistil $D 2>&1 | tee -a "$OUT/lean_depth.txt" | grep -E '^prefill'
done
B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3"
has f16 && for v in 0 1; do echo "== MMA_F16=$v"; PISTIL_CUDA_DEFINES=MMA_F16=$v timeout 50 ./.dev/pistil $B 2>&1 | tee -a "$OUT/lean_f16.txt" | grep -E '^prefill'; done
has sass && SASS_KERNELS=attention_prefill_mma PROMPT=8192 SKIP=70 timeout 200 bash cuda/device_sass.sh 2>&1 | tail -5
