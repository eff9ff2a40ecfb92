#!/bin/bash
# Decode speed of early loads on a GPU machine, from the repository root with .dev/pistil
# carried and, optionally, .dev/pistil-base (another commit's binary, timed beside it;
# cuda/device_pack.sh with BASE=REV packs both): `pistil bench --backend cuda` on the full
# synthetic model, decode of 64 tokens at CONTEXTS (default 0,4096), medians of 3, ROUNDS
# rounds (default 2), alternating base, early loads on (the default) and off, then each
# of SWITCHES (space-separated; a comma joins several pass switches into one variant) and
# of DEFINES (space-separated kernel tuning macros for PISTIL_CUDA_DEFINES, e.g.
# "MVM_STEPS=2 MMA_XPARTS=2"; a comma joins several into one variant).
# LATE=0 leaves out the early-loads-off variant.
set -u
. "$(dirname "$0")/device_lib.sh"
OUT=${OUT:-/tmp/cuda-out}
CONTEXTS=${CONTEXTS:-0,4096}
ROUNDS=${ROUNDS:-2}
SWITCHES=${SWITCHES:-}
DEFINES=${DEFINES:-}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
sed 's/^early_loads = true/early_loads = false/' pipeline.toml > /tmp/lateloads.toml
bench() { # name binary args...
	local name=$1 bin=$2
	shift 2
	decode_bench "round $round $name" "$OUT/early_${round}_${name}.txt" 150 "$CONTEXTS" "$bin" "$@"
}
for round in $(seq "$ROUNDS"); do
	[ -x .dev/pistil-base ] && bench base .dev/pistil-base --pipeline .dev/pipeline-base.toml
	bench early .dev/pistil
	[ "${LATE:-1}" = 0 ] || bench late .dev/pistil --pipeline /tmp/lateloads.toml
	for sw in $SWITCHES; do
		flags=()
		IFS=, read -ra parts <<< "$sw"
		for p in "${parts[@]}"; do flags+=("-pass=$p"); done
		bench "${sw//[\/,]/_}" .dev/pistil "${flags[@]}"
	done
	for d in $DEFINES; do
		PISTIL_CUDA_DEFINES="${d//,/ }" bench "${d//[=,]/_}" .dev/pistil
	done
done
