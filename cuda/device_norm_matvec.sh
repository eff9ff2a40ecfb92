#!/bin/bash
# Decode speed of norm-matvec on a GPU machine, from the repository root with .dev/pistil
# (and .dev/pistil-base, another commit's binary, when packed: cuda/device_pack.sh with
# BASE=REV): `pistil bench --backend cuda` on the full synthetic model, decode of 64
# tokens at CONTEXTS (default 0,4096), medians of 3, ROUNDS rounds (default 2),
# alternating base, the defaults (norm-matvec: the routers' norms folded), the q4
# projections' norms folded as well (norm-matvec-q4 on), those alone, and neither.
set -u
OUT=${OUT:-/tmp/cuda-out}
CONTEXTS=${CONTEXTS:-0,4096}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
bench() { # name binary args...
	local name=$1 bin=$2
	shift 2
	timeout 150 "$bin" bench --backend cuda --model /tmp/full --prompts= --contexts "$CONTEXTS" \
		--decode-tokens 64 --repeats 3 --bandwidth-mib 0 "$@" > "$OUT/norm_${round}_${name}.txt" 2>&1
	echo "round $round $name: $(grep -E '^decode' "$OUT/norm_${round}_${name}.txt" | awk '{printf "ctx %s %s  ", $5, $6}')$(grep -E 'rror' "$OUT/norm_${round}_${name}.txt" | tail -1)"
}
for round in $(seq "$ROUNDS"); do
	[ -x .dev/pistil-base ] && bench base .dev/pistil-base --pipeline .dev/pipeline-base.toml
	bench defaults .dev/pistil
	bench with-q4 .dev/pistil -pass=norm-matvec-q4/on
	bench q4-only .dev/pistil -pass=norm-matvec/off -pass=norm-matvec-q4/on
	bench off .dev/pistil -pass=norm-matvec/off
done
