#!/bin/bash
# Which decode kernels keep the answer when their bodies run twice (PZ_REPEAT_KERNELS,
# ops/kernels/prelude_cuda.h), so that cuda/device_repeat.sh may time them: `pistil
# check --backend cuda` on the golden mlx-q4 fixture (its decode plan launches every
# kernel the full model's does), decoding from 90, on the CUDA emulator, once per kernel
# of KERNELS (default: every kernel of the decode plan). A kernel that reads what it
# writes (a state updated in place, a residual added in place) fails. From the
# repository root; builds the emulator into .dev/emu if absent. Prints one line a kernel.
set -u
cd "$(dirname "$0")/../.."
[ -e .dev/emu/libcuda.so.1 ] || bash cuda/emu/build.sh .dev/emu > /dev/null
export PISTIL_LIBCUDA=$PWD/.dev/emu/libcuda.so.1 PISTIL_LIBNVRTC=$PWD/.dev/emu/libnvrtc.so.12
CGO_ENABLED=0 go build -o .dev/pistil-emu ./cmd/pistil || exit 1
M=testdata/golden/tiny-s1/mlx-q4
KERNELS=${KERNELS:-$(./.dev/pistil-emu compile --model $M --backend cuda --phase decode -v 2>&1 | grep -oE '\[[a-z0-9_]+ [0-9]+x' | awk '{print substr($1,2)}' | sort -u)}
for k in $KERNELS; do
	out=$(PISTIL_CUDA_DEFINES="PZ_REPEAT_KERNELS=\"$k\"" timeout 600 ./.dev/pistil-emu check --backend cuda --model $M --reference $M/reference.safetensors --decode-from 90 2>&1)
	echo "$k: $(echo "$out" | grep -E '^max abs error' | head -1) $(echo "$out" | grep -oE '^PASS|FAIL' | head -1)"
done
