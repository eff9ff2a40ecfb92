#!/bin/bash
# Decode attention's key split swept on a GPU machine, from the repository root with
# .dev/pistil carried: the full synthetic model (/tmp/full, made if absent), decode of 64
# tokens, medians of 3, with [attention] key_block_split_from / key_block_keys set per
# variant (VARIANTS: "name:from:keys:contexts ...", default below), then Nsight Compute on
# the decode steps' attention_partial and attention_merge launches after a prompt of each
# of PROMPTS (default 4096) with the defaults (cuda/device_attn_profile.sh). Logs in $OUT.
# At 4,096 keys the default cuts each kv head's keys into 64 ranges (ShortSplits) of 64
# keys; from 32,768 into blocks of 256 keys.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
VARIANTS=${VARIANTS:-"default:32768:256:4096,32768 b16:1024:16:4096 b32:1024:32:4096 b64:1024:64:32768 b128:32768:128:32768"}
for round in $(seq "${ROUNDS:-1}"); do
	for v in $VARIANTS; do
		IFS=: read -r name from keys ctxs <<< "$v"
		sed -e "s/^key_block_split_from = .*/key_block_split_from = $from/" -e "s/^key_block_keys = .*/key_block_keys = $keys/" pipeline.toml > "/tmp/split_$name.toml"
		decode_bench "round $round $name (from $from, keys $keys)" "$OUT/split_${round}_$name.txt" 200 "$ctxs" ./.dev/pistil --pipeline "/tmp/split_$name.toml"
	done
done
[ "${PROFILE:-1}" = 0 ] || PROMPTS=${PROMPTS:-4096} SWITCHES=on timeout 300 bash cuda/device_attn_profile.sh
