#!/bin/bash
# Should a bf16 KV cache be the CUDA default? (issue 11: 4,096 tokens on top of 32,768
# prefill at 6,200 tok/s over a bf16 cache on an H100, 4,045 over float32; cuda/README.md,
# thirty-sixth session.) On a GPU machine, from the repository root with .dev/pistil
# carried (cuda/device_pack.sh). STEPS picks (default "wide decode"):
#  wide:   issue 11's wide fixture (testdata/golden/make_golden.py --preset wide: the real
#          per-layer widths, SEQ teacher-forced positions, default 192; about 40 s on the
#          device's python3 with torch) and `pistil check --backend cuda` over a float32
#          and a bf16 cache on both layouts, whole, in chunks of 64 and decoding from
#          SEQ-32, held to the tensor-core bound (top-1 >= 99.5%, perplexity ratio
#          within 1.0002): what the bf16 cache costs at the real widths;
#  decode: `pistil bench` decode at 0, 4,096 and 32,768 (64 tokens, 3 repeats) over both
#          caches, ROUNDS rounds (default 2) alternating: issue 10's targets over each.
# Logs in $OUT; each step prints a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
SEQ=${SEQ:-192}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-wide decode}
has() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if has decode && [ ! -f /tmp/full/config.json ]; then
	./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1 &
	synth=$!
fi
if has wide; then
	if [ ! -f /tmp/wide/meta.json ]; then
		python3 testdata/golden/make_golden.py --preset wide --seed 1 --seq "$SEQ" --gen 16 --out /tmp/wide > "$OUT/make_wide.log" 2>&1
		[ -f /tmp/wide/meta.json ] || { tail -5 "$OUT/make_wide.log"; exit 1; }
	fi
	for kv in f32 bf16; do
		for layout in mlx-q4 hf; do
			for args in "" "--chunk 64" "--decode-from $((SEQ - 32))"; do
				echo "== $kv $layout $args" >> "$OUT/bf16_wide.log"
				timeout 120 ./.dev/pistil check --backend cuda --model "/tmp/wide/$layout" --reference "/tmp/wide/$layout/reference.safetensors" \
					--kv-cache "$kv" --tolerance bf16-kv --min-top1 0.995 --max-ppl-ratio 1.0002 $args >> "$OUT/bf16_wide.log" 2>&1
				echo "$kv $layout $args: exit $? $(grep -E '^(max abs error|top-1|perplexity)' "$OUT/bf16_wide.log" | tail -3 | tr -s ' ' | tr '\n' ' ')"
			done
		done
	done
fi
if has decode; then
	[ -n "${synth:-}" ] && wait "$synth"
	for round in $(seq "$ROUNDS"); do
		kvs="f32 bf16"
		[ $((round % 2)) = 0 ] && kvs="bf16 f32"
		for kv in $kvs; do
			echo "== round $round kv $kv"
			timeout 280 ./.dev/pistil bench --backend cuda --model /tmp/full --kv-cache "$kv" --prompts= --contexts 0,4096,32768 \
				--decode-tokens 64 --repeats 3 --bandwidth-mib 0 > "$OUT/bf16_decode_${round}_$kv.txt" 2>&1
			grep -E "^decode|rror" "$OUT/bf16_decode_${round}_$kv.txt"
		done
	done
fi
