#!/bin/bash
# Decode attention's kernels under Nsight Compute on a GPU machine, from the repository
# root with .dev/pistil carried: the full synthetic model (/tmp/full, made if absent)
# generates after a prompt of each length in PROMPTS (default "1 8192"; token ids 1..N),
# graphs off so each dispatch is its own launch, with the pass PASS (default
# mma-decode-attention) on and off (SWITCHES, default "on off"; TAG names the logs of a
# PISTIL_CUDA_DEFINES variant); for each, the decode steps' attention_gqa(_mma, _staged)
# and attention_merge launches: time, DRAM bytes, registers, achieved occupancy and the
# warps' main stall reasons (cycles per issued instruction), averaged per kernel name.
# Logs in $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
printf '[cuda]\ngraphs = false\n' > /tmp/nographs.toml
# Stall reasons, each as warps stalled per issued instruction (what WarpStateStats charts).
STALLS=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard short_scoreboard barrier math_pipe_throttle mio_throttle lg_throttle wait no_instruction | sed 's/,$//')
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for P in ${PROMPTS:-1 8192}; do
	ids=$(seq -s, 1 "$P")
	for v in ${SWITCHES:-on off}; do
		log="$OUT/ncu_attn_${P}_${PASS:-mma-decode-attention}_$v${TAG:-}.csv"
		# Prefill runs attention_prefill(_mma): the pattern meets decode's launches only.
		timeout 300 "$NCU" --clock-control none -k 'regex:^attention_(gqa|gqa_mma|gqa_staged|merge)$' --launch-skip 4 --launch-count 40 \
			--metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,$STALLS \
			--csv --page raw --log-file "$log" \
			./.dev/pistil generate --model /tmp/full --backend cuda --pipeline /tmp/nographs.toml -pass=${PASS:-mma-decode-attention}/$v --prompt-ids "$ids" --max-tokens 8 > "$OUT/ncu_attn_run_${P}_$v.log" 2>&1
		echo "== prompt $P ${PASS:-mma-decode-attention} $v ${PISTIL_CUDA_DEFINES:-}: ncu exit $?"
		python3 - "$log" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; data = [r for r in rows[hdr + 2:] if len(r) == len(h)]
col = lambda n: h.index(n)
def num(s): return float(s.replace(',', '')) if s else 0.0
stalls = [c for c in h if c.startswith('smsp__average_warps_issue_stalled_')]
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0, collections.Counter()])
for r in data:
    a = agg[r[col('Kernel Name')].split('(')[0]]
    a[0] += 1; a[1] += num(r[col('gpu__time_duration.sum')]); a[2] += num(r[col('dram__bytes_read.sum')])
    a[3] = num(r[col('launch__registers_per_thread')]); a[4] += num(r[col('sm__warps_active.avg.pct_of_peak_sustained_active')])
    for c in stalls: a[5][c.split('stalled_')[1].split('_per_issue')[0]] += num(r[col(c)])
for k, (n, t, b, regs, occ, st) in sorted(agg.items()):
    top = ' '.join(f"{s}={v/n:.1f}" for s, v in st.most_common(4))
    print(f"{k:22s} {n:3d} launches {t/n/1e3:8.2f} us/launch {b/t if t else 0:8.1f} GB/s {regs:4.0f} regs {occ/n:5.1f}% warps active; stalls {top}")
PY
	done
done
