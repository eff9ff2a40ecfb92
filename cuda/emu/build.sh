#!/bin/bash
# Builds the CUDA emulator (see README.md) into DIR (default .dev/emu):
#   bash cuda/emu/build.sh [DIR]
#   PISTIL_LIBCUDA=DIR/libcuda.so.1 PISTIL_LIBNVRTC=DIR/libnvrtc.so.12 go test ./cuda -run TestGrid/issue10
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-.dev/emu}
mkdir -p "$dir"
cp "$here/emu_rt.h" "$dir/"
g++ -O2 -std=c++17 -fPIC -shared -o "$dir/libcuda.so.1" "$here/libcuda.cpp"
g++ -O2 -std=c++17 -fPIC -shared -o "$dir/libnvrtc.so.12" "$here/libnvrtc.cpp" -ldl
echo "built $dir/libcuda.so.1 and $dir/libnvrtc.so.12"
