#!/bin/bash
# Builds the device binaries (static, stripped: pistil and cuda.test) and packs them into
# .dev/bin.tar.xz, about 8 MB, so a device call carries them under its 64 MiB limit with
# the tree (run: device tool, carry [".dev/bin.tar.xz"], then tar -C .dev -xJf .dev/bin.tar.xz).
# BASE=REV also packs REV's pistil as pistil-base and its pipeline.toml as
# pipeline-base.toml (both land in .dev), for timing beside it (cuda/device_early_loads.sh).
set -e
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -ldflags='-s -w' -o .dev/pistil ./cmd/pistil
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o .dev/cuda.test ./cuda
files=(pistil cuda.test)
if [ -n "${BASE:-}" ]; then
	rm -rf .dev/base && git worktree add -f --detach .dev/base "$BASE" > /dev/null
	(cd .dev/base && CGO_ENABLED=0 go build -ldflags='-s -w' -o ../pistil-base ./cmd/pistil)
	cp .dev/base/pipeline.toml .dev/pipeline-base.toml
	git worktree remove --force .dev/base
	files+=(pistil-base pipeline-base.toml)
fi
tar -C .dev -cJf .dev/bin.tar.xz "${files[@]}"
ls -la .dev/bin.tar.xz
