#!/bin/bash
# The SASS of CUDA kernels on this machine, no GPU needed: the kernels' source (`pistil
# kernels --backend cuda`, as NVRTC compiles it on the device) compiled for sm_90 by a
# local nvcc, then per kernel its registers, spills and, for each loop (a backward
# branch), its instruction count and opcodes. Loop bodies of constant trip count are what
# a GPU executes per iteration, so two versions of a kernel compare by their loops before
# any device time is spent (the thirty-first session counted attention_prefill_mma's moves
# this way). ptxas here is CUDA 11.8's (Debian's nvidia-cuda-toolkit), the device's is
# newer: counts are indicative, registers may differ by a few.
#   bash cuda/sass_local.sh attention_prefill_mma [more kernels]
# Needs nvcc: on Debian 12, enable the non-free component (/etc/apt/sources.list.d/
# debian.sources: "Components: main contrib non-free") and `apt-get install
# --no-install-recommends nvidia-cuda-toolkit` (about 2 minutes). nvcc 11.8 refuses gcc
# 12 as its host compiler; it takes clang-14 (installed with it). Output in $OUT (default
# /tmp/sass): kernels.cu, kernels.cubin, NAME.sass. DEFINES="-DMMA_F16=1 ..." passes
# tuning macros.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 KERNEL..." >&2; exit 2; }
command -v nvcc > /dev/null || { echo "no nvcc: see this script's header for Debian's nvidia-cuda-toolkit" >&2; exit 1; }
OUT=${OUT:-/tmp/sass}
mkdir -p "$OUT"
go run ./cmd/pistil kernels --backend cuda > "$OUT/kernels.cu"
host=$(command -v clang-14 || command -v clang || true)
nvcc ${host:+-ccbin "$host"} -arch=sm_90 -cubin ${DEFINES:-} -o "$OUT/kernels.cubin" "$OUT/kernels.cu" 2>&1 |
	grep -E "error" || true
[ -s "$OUT/kernels.cubin" ] || { echo "nvcc failed" >&2; exit 1; }
for k in "$@"; do
	cuobjdump -sass -fun "$k" "$OUT/kernels.cubin" > "$OUT/$k.sass"
	echo "== $k: $(cuobjdump -res-usage "$OUT/kernels.cubin" 2>&1 | grep -A1 "Function $k:" | tail -1 | sed 's/^ *//')"
	python3 - "$OUT/$k.sass" <<'PY'
import collections, re, sys
lines = []
for l in open(sys.argv[1]):
    m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', l)
    if m:
        lines.append((int(m.group(1), 16), m.group(2)))
print(f"   {len(lines)} instructions")
loops = set()
for at, ins in lines:
    t = re.search(r'\bBRA\b.*?0x([0-9a-f]+)', ins)
    if t and int(t.group(1), 16) <= at:
        loops.add((int(t.group(1), 16), at))
for lo, hi in sorted(loops, key=lambda x: x[0] - x[1])[:8]:
    body = [ins for at, ins in lines if lo <= at <= hi]
    ops = collections.Counter(re.sub(r'^@!?U?P[0-9T]\s+', '', x).split()[0] for x in body)
    moves = ops['MOV'] + ops['IMAD.MOV.U32']
    print(f"   loop {lo:#x}-{hi:#x}: {len(body)} instructions, {moves} moves:",
          ' '.join(f"{k} {v}" for k, v in ops.most_common(14)))
PY
done
