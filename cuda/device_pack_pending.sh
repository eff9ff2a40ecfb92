#!/bin/bash
# Builds the binaries cuda/device_s33.sh runs into .dev/r.tar.xz (about 8 MB: one xz stream
# whose dictionary spans the binaries, which differ only in their kernel source; separate
# packs with the tree overflowed a call's 64 MiB):
#   r/cuda.test                        main as it is
#   r/pistil-stage, r/cuda.test-stage  main with pending/attn-stage applied
# Run from the repository root on main; then carry .dev/r.tar.xz and start the call with
# `tar -C .dev -xJf .dev/r.tar.xz`. The test binaries find the fixtures through
# PISTIL_TESTDATA, which the device scripts set (a binary built in a worktree would look
# under the worktree's path).
set -eu
cd "$(dirname "$0")/.."
mkdir -p .dev/r
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o .dev/r/cuda.test ./cuda
# build_with SERIES SUFFIX: main with pending/SERIES applied, in a throwaway worktree.
build_with() {
	local wt
	wt=$(mktemp -d)
	git worktree add -f --detach "$wt" HEAD > /dev/null
	(cd "$wt" && git am -q "$OLDPWD"/pending/"$1"/*.patch &&
		CGO_ENABLED=0 go build -ldflags='-s -w' -o "$OLDPWD/.dev/r/pistil$2" ./cmd/pistil &&
		CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$OLDPWD/.dev/r/cuda.test$2" ./cuda)
	git worktree remove --force "$wt"
}
build_with attn-stage -stage
tar -C .dev -cf - r/cuda.test r/pistil-stage r/cuda.test-stage | xz -9e --lzma2=dict=192MiB > .dev/r.tar.xz
ls -la .dev/r.tar.xz
