#!/bin/bash
# Builds a pending series' device binaries beside main's into .dev/r.tar.xz (about 7 MB:
# one xz stream whose dictionary spans the binaries, which differ only in their kernel
# source; separate packs with the tree overflowed a call's 64 MiB):
#   r/pistil, r/cuda.test                    main as it is
#   r/pistil-SUFFIX, r/cuda.test-SUFFIX      main with pending/SERIES applied
# Usage, from the repository root on main: bash cuda/device_pack_pending.sh SERIES [SUFFIX]
# (SUFFIX defaults to SERIES); then carry .dev/r.tar.xz and start the call with
# `tar -C .dev -xJf .dev/r.tar.xz`. The test binaries find the fixtures through
# PISTIL_TESTDATA, which the device scripts set (a binary built in a worktree would look
# under the worktree's path). To run the whole check on the series, copy its binaries
# over .dev/pistil and .dev/cuda.test and run cuda/device_check.sh (the thirty-fourth
# session's way with attn-stage).
set -eu
cd "$(dirname "$0")/.."
series=${1:?usage: cuda/device_pack_pending.sh SERIES [SUFFIX]}
suffix=-${2:-$series}
[ -d "pending/$series" ] || { echo "no pending/$series"; exit 1; }
mkdir -p .dev/r
CGO_ENABLED=0 go build -ldflags='-s -w' -o .dev/r/pistil ./cmd/pistil
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o .dev/r/cuda.test ./cuda
wt=$(mktemp -d)
git worktree add -f --detach "$wt" HEAD > /dev/null
(cd "$wt" && git am -q "$OLDPWD/pending/$series"/*.patch &&
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$OLDPWD/.dev/r/pistil$suffix" ./cmd/pistil &&
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$OLDPWD/.dev/r/cuda.test$suffix" ./cuda)
git worktree remove --force "$wt"
tar -C .dev -cf - r/pistil r/cuda.test "r/pistil$suffix" "r/cuda.test$suffix" | xz -9e --lzma2=dict=192MiB > .dev/r.tar.xz
ls -la .dev/r.tar.xz
