#!/bin/bash
# Issue 11's ablation table on a GPU machine, from the repository root with .dev/pistil
# carried (cuda/device_pack.sh): prefill of PROMPTS (default 512,4096) at an empty context
# with the default pipeline and with each prefill optimisation switched off in turn, the
# CUDA prefill chunk at 512, 1,024 (the default) and 2,048, and 4,096 tokens on top of
# DEPTH (default 32768) with the tensor-core prefill attention on and off (one run each:
# the 32K context is prefilled first, untimed, every run). `pistil bench --backend cuda`
# on the full synthetic model, medians of REPEATS (default 3). Logs in $OUT; the summary
# prints one line per run.
set -u
OUT=${OUT:-/tmp/cuda-out}
PROMPTS=${PROMPTS:-512,4096}
DEPTH=${DEPTH:-32768}
REPEATS=${REPEATS:-3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
B="./.dev/pistil bench --backend cuda --model /tmp/full --contexts= --bandwidth-mib 0"
run() { # name, then bench flags
	local name=$1
	shift
	echo "== $name: $*" >> "$OUT/ablation.txt"
	timeout 150 $B "$@" >> "$OUT/ablation.txt" 2>&1
	local rc=$?
	awk -v n="$name" '/^== /{p=0} index($0, "== " n ":")==1{p=1} p && /^prefill/{printf "%-28s %s\n", n, $0}' "$OUT/ablation.txt"
	[ $rc = 0 ] || echo "$name: exit $rc ($(grep -E 'rror' "$OUT/ablation.txt" | tail -1))"
}
run default --prompts "$PROMPTS" --repeats "$REPEATS"
for pass in tensor-cores mma-attention tile-attention expert-tiles expert-split-k mma-split-k expert-per-slot fuse-dequant; do
	run "$pass/off" --prompts "$PROMPTS" --repeats "$REPEATS" -pass=$pass/off
done
for chunk in 512 2048; do
	run "chunk $chunk" --prompts 4096 --repeats "$REPEATS" --chunk $chunk
done
run "depth" --prompts 4096 --depths "$DEPTH" --repeats 1
run "depth mma-attention/off" --prompts 4096 --depths "$DEPTH" --repeats 1 -pass=mma-attention/off
