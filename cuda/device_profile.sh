#!/bin/bash
# Per-kernel decode profile on a GPU machine, from the repository root, with .dev/pistil
# carried. Writes the full synthetic model to /tmp/full if absent, then runs one decode
# step's kernels under Nsight Compute (graphs off, so each dispatch is its own launch),
# reading only the duration and the DRAM bytes of each kernel, and prints the sum per
# kernel name: time in kernels, GB/s, and, beside it, the graph-mode step time from
# `pistil bench`. The gap between the two is launch and dependency latency. PASSES (e.g.
# "-pass=fuse-norm-matvec/on -pass=fuse-conv-l2/on") profiles the plan with those switches.
set -u
PASSES=${PASSES:-}
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
if [ ! -f /tmp/full/config.json ]; then
	./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
fi
STEP=$(./.dev/pistil compile --model /tmp/full --backend cuda --phase decode $PASSES 2>/dev/null | awk '/dispatches/ {print $2; exit}')
echo "decode dispatches per step: $STEP"
printf '[cuda]\ngraphs = false\n' > /tmp/nographs.toml
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# A one-token prompt then decode: skip the first steps (load, prompt, warm-up), profile one step.
timeout 400 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
	--launch-skip $((STEP * 6)) --launch-count "$STEP" --csv --page raw --log-file "$OUT/ncu_decode.csv" \
	./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml $PASSES --prompt-ids 1 --max-tokens 12 > "$OUT/ncu_run.log" 2>&1
echo "ncu exit $?"
python3 - "$OUT/ncu_decode.csv" <<'PY' | tee "$OUT/profile_decode.txt"
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; data = [r for r in rows[hdr + 2:] if len(r) == len(h)]
ki, ti = h.index('Kernel Name'), h.index('gpu__time_duration.sum')
ri, wi = h.index('dram__bytes_read.sum'), h.index('dram__bytes_write.sum')
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
def num(s): return float(s.replace(',', '')) if s else 0.0
for r in data:
    a = agg[r[ki].split('(')[0]]; a[0] += 1; a[1] += num(r[ti]); a[2] += num(r[ri]) + num(r[wi])
total = sum(a[1] for a in agg.values())
print(f"{len(data)} kernels, {total/1e3:.1f} us in kernels (ns units assumed)")
for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:32s} {n:4d} launches {t/1e3:9.1f} us {t/n/1e3:7.2f} us/launch {b/t if t else 0:8.1f} GB/s {100*t/total:5.1f}%")
PY
timeout 400 ./.dev/pistil bench --model /tmp/full --backend cuda ${BENCH_ARGS:---prompts 512 --contexts 0,4096 --decode-tokens 64 --repeats 3} $PASSES 2>&1 | tail -12 | tee "$OUT/bench.txt"
