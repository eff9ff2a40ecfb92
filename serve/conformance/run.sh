#!/usr/bin/env bash
# Runs the conformance scripts against a real `pistil serve` on a tiny random model: the
# OpenAI JavaScript SDK (conform.mjs), the agent clients (clients.mjs: AI SDK, LangChain
# JS, OpenAI Agents SDK) and Codex CLI (codex.mjs), all from npm at the versions pinned in
# package.json. Exits non-zero if any check fails or the server misbehaves.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "-- installing the pinned npm packages"
(cd "$here" && { npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error; })

echo "-- building pistil"
(cd "$root" && CGO_ENABLED=0 go build -o "$work/pistil" ./cmd/pistil)

echo "-- writing the tiny model"
"$work/pistil" synth --preset tiny --layout mlx-q4 --seed 7 --out "$work/model" >/dev/null

key="conformance-$RANDOM$RANDOM"
# --thinking off: requests that say nothing do not think (the checks turn it on where
# they need it); --ctx 8192 fits Codex's trimmed prompt.
"$work/pistil" serve --model "$work/model" --name tiny --port 0 --api-key "$key" --ctx 8192 \
  --queue 8 --thinking off 2>"$work/server.log" &
server_pid=$!

# The server prints its address first, then loads the model; wait for both.
url=""
for _ in $(seq 1 600); do
  url="$(sed -n 's#^pistil serve: listening on \(http://[^ ]*\)$#\1#p' "$work/server.log" | head -n1)"
  if [ -n "$url" ] && curl -fsS "$url/health" >/dev/null 2>&1; then
    break
  fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "pistil serve exited early:"; cat "$work/server.log"; exit 1
  fi
  sleep 0.2
done
if [ -z "$url" ] || ! curl -fsS "$url/health" >/dev/null 2>&1; then
  echo "pistil serve did not become ready:"; cat "$work/server.log"; exit 1
fi
case "$url" in
  http://127.0.0.1:*) ;;
  *) echo "pistil serve listens on $url, not on loopback by default"; exit 1 ;;
esac

echo "-- running the conformance checks against $url"
status=0
for script in conform.mjs clients.mjs codex.mjs; do
  echo "-- $script"
  PISTIL_URL="$url/v1" PISTIL_MODEL=tiny PISTIL_KEY="$key" node "$here/$script" || status=$?
done

# SIGTERM must drain and exit 0.
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
if [ "$server_status" -ne 0 ]; then
  echo "pistil serve exited with $server_status after SIGTERM:"; tail -n 20 "$work/server.log"; exit 1
fi
if grep -q "$key" "$work/server.log"; then
  echo "the API key appears in the server log"; exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "conformance failed; server log:"; tail -n 40 "$work/server.log"
fi
exit "$status"
