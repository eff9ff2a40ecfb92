#!/bin/bash
# Speed on a GPU machine, from the repository root, with .dev/pistil and .dev/cuda.test
# carried (see cuda/README.md). Writes the full-size synthetic 35B-A3B (MLX 4-bit,
# 19.5 GB) to /tmp/full, then runs the Go benchmarks and a CLI generate. Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
if [ ! -f /tmp/full/config.json ]; then
	/usr/bin/time -f "synth %e s" ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full 2>&1 | tail -2 | tee "$OUT/synth.log"
fi
cd cuda
export PISTIL_BENCH_MODEL=/tmp/full
timeout 200 ../.dev/cuda.test -test.run '^$' -test.bench 'Decode' -test.benchtime "${DECODE_N:-48}x" 2>&1 | tee "$OUT/bench_decode.log" | grep -E "Benchmark|FAIL|rror"
timeout 200 ../.dev/cuda.test -test.run '^$' -test.bench 'Generate' -test.benchtime "${DECODE_N:-64}x" 2>&1 | tee "$OUT/bench_generate.log" | grep -E "Benchmark|FAIL|rror"
timeout 200 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime "${PREFILL_N:-4}x" 2>&1 | tee "$OUT/bench_prefill.log" | grep -E "Benchmark|FAIL|rror"
cd ..
# The tensor-core GEMMs on (the default) and off (the SIMT tiles), one CLI run each,
# alternating.
sed 's/^tensor-cores = true/tensor-cores = false/' pipeline.toml > /tmp/simt.toml
for round in 1 2; do
	for pipe in pipeline.toml /tmp/simt.toml; do
		echo "== round $round $pipe" | tee -a "$OUT/bench_cli.log"
		timeout 280 ./.dev/pistil bench --backend cuda --model /tmp/full --pipeline "$pipe" --prompts 512,4096 --contexts 0 --decode-tokens 16 --repeats 3 2>&1 | tee -a "$OUT/bench_cli.log" | grep -vE "^\s*$" | tail -6
	done
done
cd cuda
# Prefill on top of a deep context, tile-attention (attention_prefill) on and off.
timeout 300 ../.dev/cuda.test -test.run '^$' -test.bench 'TurnAtDepth' -test.benchtime "${DEPTH_N:-2}x" 2>&1 | tee "$OUT/bench_depth.log" | grep -E "Benchmark|FAIL|rror"
timeout 150 ../.dev/cuda.test -test.run '^$' -test.bench 'Profile' -test.benchtime 16x 2>&1 > "$OUT/profile.log"
head -40 "$OUT/profile.log" | cut -c1-80
