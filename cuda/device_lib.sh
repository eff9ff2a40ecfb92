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
