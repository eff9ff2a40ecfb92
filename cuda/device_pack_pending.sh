#!/bin/bash
# Builds the binaries cuda/device_s32.sh runs, from main and the pending series (see
# pending/README.md), into .dev/all.tar.xz (about 7 MB: one xz stream with a dictionary
# that spans the binaries, which differ only in their kernel source; three separate
# packs overflowed a call's 64 MiB with the tree):
#   pistil, cuda.test              main with pending/bf16-products applied (the "tree")
#   pistil-main                    main as it is
#   pistil-stage, cuda.test-stage  main with pending/attn-stage applied
# Run from the repository root on main; then carry .dev/all.tar.xz and start the call with
# `tar -C .dev -xJf .dev/all.tar.xz`.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .dev
CGO_ENABLED=0 go build -ldflags='-s -w' -o .dev/pistil-main ./cmd/pistil
# build_with SERIES SUFFIX: main with pending/SERIES applied, in a throwaway worktree.
build_with() {
	local wt
	wt=$(mktemp -d)
	git worktree add -f --detach "$wt" HEAD > /dev/null
	(cd "$wt" && git am -q "$OLDPWD"/pending/"$1"/*.patch &&
		CGO_ENABLED=0 go build -ldflags='-s -w' -o "$OLDPWD/.dev/pistil$2" ./cmd/pistil &&
		CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$OLDPWD/.dev/cuda.test$2" ./cuda)
	git worktree remove --force "$wt"
}
build_with bf16-products ""
build_with attn-stage -stage
tar -C .dev -cf - pistil cuda.test pistil-main pistil-stage cuda.test-stage | xz -9e --lzma2=dict=192MiB > .dev/all.tar.xz
ls -la .dev/all.tar.xz
