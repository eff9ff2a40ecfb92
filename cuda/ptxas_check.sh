#!/bin/bash
# The CUDA kernels through a real CUDA compiler, no GPU needed (CI runs it): the source as
# NVRTC compiles it on the device (`pistil kernels --backend cuda`) compiled to a cubin by
# nvcc for sm_90 (the H100 and H200), sm_90 with PZ_LATE_LOADS ([cuda] early_loads =
# false), and sm_80 (the A100, which the kernels serve with less group memory and no
# programmatic launch, and which no session has had). cuda/emu compiles the same source
# with g++ for the CPU, so it never sees the inline PTX, the __shared__ rules or the
# architecture guards; this catches what only ptxas would, before a device call does
# (the thirty-fifth session's second `extern __shared__` of another type, and the
# forty-first's `FA_KEYS` redefinition, were found this way). Fails on any compile error.
# Needs nvcc: Debian's nvidia-cuda-toolkit (CUDA 11.8, in the non-free component; .ci/run
# installs it), whose nvcc takes clang-14 as its host compiler (it refuses gcc 12). ptxas
# 11.8 is older than the device's NVRTC: what passes here can still fail there, and a PTX
# feature newer than CUDA 11.8 would fail here and pass there (the kernels use none).
# Output in $OUT (default: a temporary folder): kernels.cu and per target its cubin and log.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v nvcc > /dev/null || { echo "no nvcc: see this script's header" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
CGO_ENABLED=0 go run ./cmd/pistil kernels --backend cuda > "$OUT/kernels.cu" || exit 1
host=$(command -v clang-14 || command -v clang || true)

# compile NAME NVCC-ARGS... builds one target and prints its result line.
compile() {
	local name=$1
	shift
	if nvcc ${host:+-ccbin "$host"} -std=c++17 -cubin "$@" -o "$OUT/$name.cubin" "$OUT/kernels.cu" > "$OUT/$name.log" 2>&1 &&
		[ -s "$OUT/$name.cubin" ]; then
		echo "ok   $name: $(cuobjdump -res-usage "$OUT/$name.cubin" 2>/dev/null | grep -c 'Function ') functions"
		return 0
	fi
	echo "FAIL $name:"
	grep -E "error|rror:" "$OUT/$name.log" | head -20
	return 1
}
compile sm_90 -arch=sm_90 > "$OUT/sm_90.result" &
a=$!
compile sm_90-late-loads -arch=sm_90 -DPZ_LATE_LOADS > "$OUT/sm_90-late-loads.result" &
b=$!
compile sm_80 -arch=sm_80 > "$OUT/sm_80.result" &
c=$!
status=0
for pid in $a $b $c; do wait "$pid" || status=1; done
cat "$OUT/sm_90.result" "$OUT/sm_90-late-loads.result" "$OUT/sm_80.result"
exit $status
