#!/bin/bash
# Long-context decode on a GPU machine, from the repository root, with .dev/pistil carried
# (see cuda/README.md): the full-size synthetic 35B-A3B (MLX 4-bit, written to /tmp/full
# when absent), decode at CONTEXTS (default 32768; e.g. CONTEXTS=32768,65536,131072),
# 64 decode tokens, 3 repeats, with a float32 and a bf16 KV cache ([state] kv_cache), each
# with decode attention's fixed-block key split from 32768 keys (the default) and never
# ([attention] key_block_split_from = 0), ROUNDS rounds (default 2; each run loads the
# model and prefills each context once, about a minute at 32768). Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
CONTEXTS=${CONTEXTS:-32768}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
if [ ! -f /tmp/full/config.json ]; then
	/usr/bin/time -f "synth %e s" ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full 2>&1 | tail -2 | tee "$OUT/synth.log"
fi
sed 's/^key_block_split_from = .*/key_block_split_from = 0/' pipeline.toml > /tmp/noblocks.toml
./.dev/pistil compile --backend cuda --phase decode --context 32768 2>&1 | grep -E "decode|bytes moved" | tee "$OUT/longctx_plan_f32.txt"
./.dev/pistil compile --backend cuda --phase decode --context 32768 --kv-cache bf16 2>&1 | grep -E "decode|bytes moved" | tee "$OUT/longctx_plan_bf16.txt"
for round in $(seq "$ROUNDS"); do
	kvs="f32 bf16"
	[ $((round % 2)) = 0 ] && kvs="bf16 f32" # alternate the order between rounds
	for kv in $kvs; do
		for pipe in pipeline.toml /tmp/noblocks.toml; do
			echo "== round $round kv $kv $pipe contexts $CONTEXTS" | tee -a "$OUT/bench_longctx.log"
			timeout "${RUN_TIMEOUT:-280}" ./.dev/pistil bench --backend cuda --model /tmp/full --pipeline "$pipe" --kv-cache "$kv" --prompts "" --contexts "$CONTEXTS" --decode-tokens 64 --repeats 3 \
				--json "$OUT/longctx_${round}_${kv}_$(basename "$pipe" .toml).json" 2>&1 | tee -a "$OUT/bench_longctx.log" | grep -vE "^\s*$" | tail -4
		done
	done
done
