# Shell helpers the device scripts share (source it: . "$(dirname "$0")/device_lib.sh").

# decode_bench LABEL LOG SECONDS CONTEXTS BINARY [ARGS...] times decode of 64 tokens at
# CONTEXTS on the full synthetic model (/tmp/full), medians of 3, with BINARY's `bench`
# and ARGS (the bandwidth line not measured), the output in LOG, within SECONDS; it prints
# LABEL, then each context's median tok/s, or the run's last error line.
decode_bench() {
	local label=$1 log=$2 secs=$3 ctxs=$4 bin=$5
	shift 5
	timeout "$secs" "$bin" bench --backend cuda --model /tmp/full --prompts= --contexts "$ctxs" \
		--decode-tokens 64 --repeats 3 --bandwidth-mib 0 "$@" > "$log" 2>&1
	echo "$label: $(grep -E '^decode' "$log" | awk '{printf "ctx %s %s  ", $5, $6}')$(grep -E 'rror' "$log" | tail -1)"
}

# run_tests LOG SECONDS REGEX runs the tests of .dev/cuda.test matching REGEX from cuda/
# (where they find their fixtures) within SECONDS, the verbose output in LOG (an absolute
# path), and prints the binary's exit status, the subtests passed and failed, and the
# first failures. The caller's environment reaches the tests (PISTIL_CUDA_DEFINES for a
# kernel variant).
run_tests() {
	local log=$1 secs=$2 re=$3
	(cd cuda && timeout "$secs" ../.dev/cuda.test -test.v -test.count=1 -test.run "$re" > "$log" 2>&1; echo "tests exit $?")
	echo "$(grep -c -- '--- PASS' "$log") passed, $(grep -c -- '--- FAIL' "$log") failed"
	grep -E -- '--- FAIL' "$log" | head
}
