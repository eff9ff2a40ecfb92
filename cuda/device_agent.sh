#!/bin/bash
# Issue 14 on a GPU machine: the prefix cache at agent context lengths over HTTP. Two
# `pistil serve --backend cuda` on the full synthetic 35B-A3B (one with the default,
# derived cache budget, one with the cache off as the cold reference), then the agent
# test: a 12K-token first turn and 10 more turns, each cached to within its new tokens,
# prefill under 0.5 s, the cache within its budget, answers equal to the cold server's.
#
#   cuda/device_agent.sh        one conversation
#   cuda/device_agent.sh two    two conversations (two agents) interleaved turn by turn on
#                               the same server and its default budget
#
# Needs .dev/pistil and .dev/serve.test (CGO_ENABLED=0 go test -c -o .dev/serve.test
# ./serve) and /tmp/full (pistil synth --preset full --layout mlx-q4 --out /tmp/full).
# Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/cuda-out}
mode=${1:-one}
case $mode in
one) conversations=1 limit=480 ;;
two) conversations=2 limit=560 ;;
*)
	echo "usage: $0 [one|two]" >&2
	exit 2
	;;
esac
mkdir -p "$OUT"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --seed 1 --out /tmp/full > /dev/null
./.dev/pistil serve --backend cuda --model /tmp/full --port 8080 > "$OUT/serve_cached_$mode.log" 2>&1 &
warm=$!
./.dev/pistil serve --backend cuda --model /tmp/full --port 8081 --cache-bytes -1 > "$OUT/serve_cold_$mode.log" 2>&1 &
cold=$!
for port in 8080 8081; do
	for _ in $(seq 240); do
		python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health')" 2> /dev/null && break
		sleep 1
	done
done
grep -iE 'cache|budget' "$OUT/serve_cached_$mode.log" | head -5
# The running-servers test sizes its first user message in bytes (it has no tokenizer of
# the server's): 12,000 bytes are 7,447 tokens with synth's byte-level tokenizer, so the
# default here is 20,000 bytes, about 12,400 tokens, the agent length.
(cd serve && PISTIL_AGENT_URL=http://127.0.0.1:8080 PISTIL_AGENT_COLD_URL=http://127.0.0.1:8081 \
	PISTIL_AGENT_TOKENS=${PISTIL_AGENT_TOKENS:-20000} \
	PISTIL_AGENT_CONVERSATIONS=$conversations \
	timeout $limit ../.dev/serve.test -test.run AgainstRunningServers -test.v -test.timeout $((limit - 10))s 2>&1) |
	tee "$OUT/agent_$mode.log" | grep -E 'turn|PASS|FAIL|ok|panic'
status=${PIPESTATUS[0]}
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/metrics').read().decode())" | grep -E '^pistil_prefix_cache' | tee "$OUT/cache_metrics_$mode.txt"
kill $warm $cold
wait
exit $status
