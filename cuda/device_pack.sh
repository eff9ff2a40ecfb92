#!/bin/bash
# Builds the device binaries (static, stripped: pistil and cuda.test) and packs them into
# .dev/bin.tar.xz, about 8 MB, so a device call carries them under its 64 MiB limit with
# the tree (run: device tool, carry [".dev/bin.tar.xz"], then tar -C .dev -xJf .dev/bin.tar.xz).
set -e
cd "$(dirname "$0")/.."
CGO_ENABLED=0 go build -ldflags='-s -w' -o .dev/pistil ./cmd/pistil
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o .dev/cuda.test ./cuda
tar -C .dev -cJf .dev/bin.tar.xz pistil cuda.test
ls -la .dev/bin.tar.xz
