#!/bin/bash
# Per-kernel profile of one prefill step on top of a context, on a GPU machine, from the
# repository root with .dev/pistil carried: an agent's turn (a few hundred new tokens on a
# 12K-token conversation) is such a step. A prompt of DEPTH + TOKENS tokens is generated
# with graphs off (each dispatch its own launch) in chunks of CHUNK_TOKENS (default 1,024,
# [cuda] prefill_chunk); Nsight Compute skips the launches of the DEPTH/CHUNK_TOKENS whole
# chunks (DEPTH a multiple of CHUNK_TOKENS) and profiles the next TOKENS-token step (TOKENS
# a power of two no larger than CHUNK_TOKENS, so it is one plan), reading each kernel's
# duration and DRAM bytes, summed per dispatch op.
#
#   TOKENS=128 DEPTH=12288 cuda/device_prefill_profile.sh
#   PASSES="-pass=tensor-cores/on" TOKENS=512 DEPTH=0 cuda/device_prefill_profile.sh
set -u
PASSES=${PASSES:-}
OUT=${OUT:-/tmp/cuda-out}
TOKENS=${TOKENS:-128}
DEPTH=${DEPTH:-12288}
CHUNK_TOKENS=${CHUNK_TOKENS:-1024}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --seed 1 --out /tmp/full > /dev/null
dispatches() { ./.dev/pistil compile --model /tmp/full --backend cuda --phase prefill --chunk "$1" $PASSES 2>/dev/null | awk '/dispatches/ {gsub(",", "", $2); print $2; exit}'; }
CHUNK=$(dispatches "$CHUNK_TOKENS")
STEP=$(dispatches "$TOKENS")
echo "prefill dispatches: $CHUNK per $CHUNK_TOKENS-token chunk, $STEP per $TOKENS-token step"
./.dev/pistil compile --model /tmp/full --backend cuda --phase prefill --chunk "$TOKENS" $PASSES -v 2>/dev/null > "$OUT/plan_prefill_$TOKENS.txt"
printf '[cuda]\ngraphs = false\nprefill_chunk = %d\n' "$CHUNK_TOKENS" > /tmp/nographs.toml
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ids=$(python3 -c "print(','.join(str(1 + i % 200000) for i in range($DEPTH + $TOKENS)))")
timeout 500 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
	--launch-skip $((CHUNK * DEPTH / CHUNK_TOKENS)) --launch-count "$STEP" --csv --page raw --log-file "$OUT/ncu_prefill.csv" \
	./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml $PASSES --prompt-ids "$ids" --max-tokens 1 > "$OUT/ncu_prefill_run.log" 2>&1
echo "ncu exit $?"
python3 - "$OUT/ncu_prefill.csv" "$OUT/plan_prefill_$TOKENS.txt" <<'PY' | tee "$OUT/profile_prefill_$TOKENS.txt"
import csv, sys, collections, re
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; data = [r for r in rows[hdr + 2:] if len(r) == len(h)]
ki, ti = h.index('Kernel Name'), h.index('gpu__time_duration.sum')
ri, wi = h.index('dram__bytes_read.sum'), h.index('dram__bytes_write.sum')
# The plan's dispatches in order: "gNN dN op name [kernel grid ...]", matched launch by launch.
# (op, label with the layer number dropped; the op where a dispatch has no label)
plan = [(m.group(1), re.sub(r'layers\.\d+\.', '', m.group(2)) if m.group(2)[0] not in '([' else m.group(1))
        for m in (re.match(r'\s+g\d+ d\d+ (\S+) (\S+)', l) for l in open(sys.argv[2])) if m]
def num(s): return float(s.replace(',', '')) if s else 0.0
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
bylabel = collections.defaultdict(lambda: [0, 0.0, 0.0])
for i, r in enumerate(data):
    op, label = plan[i] if i < len(plan) else ('?', '?')
    t, b = num(r[ti]), num(r[ri]) + num(r[wi])
    for a in (agg[(op, r[ki].split('(')[0])], bylabel[(label, r[ki].split('(')[0])]):
        a[0] += 1; a[1] += t; a[2] += b
total = sum(a[1] for a in agg.values())
print(f"{len(data)} kernels ({len(plan)} planned dispatches), {total/1e6:.2f} ms in kernels")
for (op, k), (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{op:24s} {k:28s} {n:4d} x {t/n/1e3:8.1f} us = {t/1e6:7.2f} ms {b/t if t else 0:8.1f} GB/s {100*t/total:5.1f}%")
# The same by dispatch label across layers (gate, up and down projections apart).
print("by dispatch (layers merged):")
for (label, k), (n, t, b) in sorted(bylabel.items(), key=lambda kv: -kv[1][1])[:24]:
    print(f"{label:40s} {k:28s} {n:4d} x {t/n/1e3:8.1f} us = {t/1e6:7.2f} ms {b/t if t else 0:8.1f} GB/s {100*t/total:5.1f}%")
PY
