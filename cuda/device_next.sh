#!/bin/bash
# Before any call that carries a kernel change: `bash cuda/ptxas_check.sh` here (CI runs
# it too), so what ptxas rejects never costs device time.
# Forty-first session: two H100 calls (of six asks; none came as an H200) ran
# device_check.sh whole on 35b4418 (1,752 tests, 154 of 154 checks, the last 23 with
# SKIP=131) and branch attn-l2-prefetch's per-op tests with AD_L2_AHEAD=4 (406 passed:
# NVRTC compiles it). Still owed, first: anything on an H200 (PARTS=tests, PARTS=checks);
# then device_bf16_default.sh STEPS=decode and device_bf16_wide.sh on the H200 against
# issue 10's 400 / 400 / 340; then the branch's timing, which the device time cut off
# after its base: on the branch, `BASE=main bash cuda/device_pack.sh`, then
# `STEPS=bench AHEADS="0 4" CONTEXTS=4096,32768 bash cuda/device_l2_ahead.sh` (about 150 s).
# Also written this session, on branch fa2-f32 (passes cuda/emu and cuda/ptxas_check.sh,
# never run on a GPU):
# attention_prefill_fa2 over a float32 cache (pass fa2-attention-f32, off), for issue
# 11's prefill at depth over the default cache; on the branch `bash cuda/device_pack.sh`,
# then `bash cuda/device_fa2_f32.sh` (tests, check lines, the wide fixture, and prefill
# at 512 / 4,096 / 4,096 on top of 32,768 with the pass off and on; about 5 minutes).
# Fortieth session: an H100 at 21:43 after nine failed or refused asks. Ran on binaries of 920cd11
# (decode attention's 16-byte bf16 loads, AD_BF16_WIDE): cuda/device_bf16_wide.sh (the
# per-op tests and decode over both caches), the off-by-default decode switches again
# (all slower), device_check.sh whole (1,751 tests, 152 of 152 checks), and
# device_bf16_default.sh STEPS=wide (the bf16 cache fails issue 11's 1.0002 on mlx-q4:
# 1.00068). Still owed, first: anything on an H200 (PARTS=tests, PARTS=checks, a call
# each; the checks now have 154 lines with AD_BF16_WIDE=0's), which runs
# TestBF16WideDecodeAttentionKeepsTheAnswer on a GPU for the first time; then
# device_bf16_default.sh STEPS=decode and device_bf16_wide.sh on the H200 against issue
# 10's 400 / 400 / 340. Then branch attn-l2-prefetch (AD_L2_AHEAD: decode attention asks
# the L2 for key tiles ahead of its register loads; written and passing cuda/emu, never
# compiled by NVRTC): `BASE=main bash cuda/device_pack.sh` on the branch, then
# cuda/device_l2_ahead.sh (per-op tests with it on; decode over both caches at
# AD_L2_AHEAD 0 / 2 / 4 / 8). (The same for the weights would add little: the staged
# twins' groups that do work, 386 of the GDN input projection's 1,024, fit the
# multiprocessors' group memory at once, so their whole tiles are already copied before
# the programmatic-launch wait.)
# Thirty-ninth session: twelve H200 asks and one H100 ask found no machine; the
# thirteenth nvidia-h200 ask came as an H100 at 19:48, on which PARTS=checks LAYOUTS=hf and
# LAYOUTS=mlx-q4 passed whole (76 + 76 lines; with the thirty-eighth session's
# PARTS=tests, all of device_check.sh on an H100) and decode / prefill were timed with
# both caches (cuda/README.md). Still owed, first: anything on an H200 (PARTS=tests,
# PARTS=checks LAYOUTS=mlx-q4, LAYOUTS=hf, a call each), then cuda/device_bf16_default.sh.
# Start pistil synth only after the checks (beside them it slowed the checks 2.5x).
# Thirty-eighth session (H100 only: four asks for an H200 found none; a call naming
# nvidia-h200 without needs_h200 came as an H100): PARTS=tests passed whole (1,751, 0
# failed); PARTS=checks passed 111 of 152 lines, 0 failed, before a 420 s limit (the hf
# fixture's last 39 lines and both all/off lines not run); split-k-only-idle at 256
# tokens measured, +3.3% (cuda/README.md). Next, first: PARTS=checks LAYOUTS=hf (the
# lines not run), then on whatever card comes for nvidia-h200 (an H200 when one is lent;
# needs_h200 is for work that cannot fit an H100, not for this) PARTS=tests, PARTS=checks
# LAYOUTS=mlx-q4 and LAYOUTS=hf, a call each; then cuda/device_bf16_default.sh. (A wait for a background `pistil synth` must
# not `pgrep -f "pistil synth"`: that matches the waiting shell's own command line.)
# Thirty-sixth session: busy-expert-tiles and split-k-only-idle (passes, no kernel change)
# landed after one H100 call each; cuda/device_check.sh ran whole on aa9a0e1 (before
# them) on an H100 in 588 s, so it now takes PARTS="tests" or PARTS="checks", a call each.
# Next, first: split-k-only-idle at 256 tokens, where it moves the GDN z projections
# (unmeasured): `pistil bench --backend cuda --model /tmp/full --contexts= --repeats 3
# --bandwidth-mib 0 --prompts 128,256,384,512 --depths 0`, the pass on and off alternating,
# two rounds (about 90 s); then PARTS=checks and PARTS=tests of cuda/device_check.sh on
# the tree (its two new lines check busy-expert-tiles on and off), on an H200 if one comes.
# Then cuda/device_bf16_default.sh (about 6 minutes): the wide fixture over a bf16 cache
# against issue 11's bound, and decode at 0 / 4,096 / 32,768 over both caches, the
# evidence for or against a bf16 KV cache as the CUDA default (prefill at depth 6,200
# against 4,045 tok/s on an H100).
# Thirty-fifth session: attention_prefill_fa2 (fa2-attention, on by default for a bf16
# cache) ran only its per-op tests and 12 check lines on an H100, and was timed on four
# attention layers alone. (Done in the thirty-sixth session on an H100: device_check.sh
# whole, and the full model's table, cuda/README.md.)
# First: the owed H200 check, cuda/device_check.sh on an H200 (the thirty-fourth session
# ran it whole on an H100, on main and on main with attn-stage, which it then merged).
# From the thirty-first session: the H200 check owed since the twenty-fourth
# session (every kernel since, GDC_MMA on by default and the thirty-first session's
# attention_prefill_mma included, ran only on H100s; the thirty-first session's five asks
# for an H200 failed to start or came as an H100): `bash cuda/device_pack.sh`, then one
# call STEPS="check" on an H200 (about 330 s on an H100: give it the call alone), then
# prefill at 512 / 4,096 and 4,096 on top of 32,768 to put H200 numbers beside the H100's.
# Device calls left for the next session, from the repository root with .dev/pistil and
# .dev/cuda.test carried (cuda/device_pack.sh builds both, stripped, into .dev/bin.tar.xz,
# which stays under the 64 MiB a call carries: `tar -C .dev -xJf .dev/bin.tar.xz` first):
#  check:   cuda/device_check.sh on the tree (last run whole in the fourteenth session, on
#           69c47ca: 1,221 tests and subtests, 82 of 82 checks);
#  floor:   cuda/device_floor.sh (ROUNDS=1), where a decode step's time goes now (the tenth
#           session's table: dense projections 1.01 ms, experts' gate/up 0.38, down 0.36
#           with 8 combine rows, small kernels 0.49, stages 0.42 of 2.92 ms);
#  longctx: decode at 32,768 with f32 and bf16 caches, the key split on and off (with
#           CONTEXTS=32768,65536,131072 past 32K: mma-decode-attention is measured only to
#           32,768);
#  attn:    attention_gqa_mma's registers (nvcc -Xptxas -v) and Nsight Compute on the
#           decode steps' attention launches after 1 and 8,192 tokens, the pass on and off
#           (cuda/device_decode_attention.sh regs, cuda/device_attn_profile.sh);
#  prefill: BenchmarkPrefill's variants (fused, unfused, SIMT tiles), never run on the H200;
#  pstalls: why prefill attention at depth is slow (issue 11: 4,096 tokens on top of 32,768
#           at 2,301.8 tok/s, the fourteenth session): Nsight Compute's stall reasons for
#           attention_prefill_mma in the last 1,024-token chunk of an 8,192-token prompt
#           (cuda/device_stalls.sh; its launches 71-73 of 80); run on the old kernel in the
#           twelfth session, not yet on the rewritten one.
#  switches: cuda/device_decode_switches.sh, the decode passes that are off by default
#           (fuse-expert-routing, gated-norm-matvec, fuse-gdn-prologue) timed again against
#           the defaults, two rounds (written in the fourteenth session, not yet run: they
#           were measured slower before the staged twins and the mma decode attention).
#  sass:    cuda/device_sass.sh, the staged twins' SASS with opcode counts and Nsight
#           Compute's instruction statistics (written in the fifteenth session, not yet
#           run): what each k-step's instructions are, before the next matrix-vector design
#           (cuda/README.md, fifteenth session: the twins are latency-bound on
#           fixed-latency and group-memory dependencies, not on copies).
# (Branch prefill-attention-v2 passed cuda/device_prefill_attention.sh and
# cuda/device_check.sh on the H200 in the fourteenth session and is merged. The line of
# cuda/device_check.sh that checks the split-k expert tiles switched on, added after that
# run when expert-split-k went off by default, has not run on an H200 yet: "check" runs it.)
# Eighteenth and nineteenth sessions (landed, measured only on an H100: no H200 was
# lent): fuse-conv-l2, early loads, coalesced greedy sampling, and norm-matvec (the
# post-attention norm inside the router's q8 projection, on; norm-matvec-q4 off). First
# on an H200, from the landed tree with main before the nineteenth session as the base
# (`BASE=5bb7e78 bash cuda/device_pack.sh`): STEPS="h200" times base and tree at 0 /
# 4,096 / 32,768 (two rounds) and runs TestGrid (it passed on the H100 with the
# nineteenth session's defaults, 15 shapes); STEPS="check" runs cuda/device_check.sh
# whole, whose norm-matvec lines have not run yet (one call each: check alone takes up
# to 420 s).
# Twentieth session (landed, H100 only again): gated_delta and conv1d read their states
# before the wait (+2.7% at context 0 in one call, not timed at 32K on its own). STEPS=
# "check" and STEPS="h200" with `BASE=52a4d69 bash cuda/device_pack.sh` ran on an H100 in
# the twenty-first session (643c5ed) and on an H200 in the twenty-third (97cf636): all
# passed (cuda/README.md). The script's exit status is its last step's test, 1 when that
# step is not selected: read each step's own "exit" line, not the call's rc.
# Twenty-fourth session (H100 only): attention_gqa_staged (staged-decode-attention, off)
# checked and timed on an H100 (cuda/README.md, "Decode attention at 4,096 and 32,768
# keys"); never on an H200. Next, with the tree of branch staged-attention-3 (three
# stages, 132 equal ranges) packed: TESTS='TestDecodeAttentionStaged|
# TestLongContextOptionsKeepTheAnswer' CONTEXTS=4096,32768 bash
# cuda/device_staged_attention.sh, then PROMPTS="4096 32768" PASS=staged-decode-attention
# bash cuda/device_attn_profile.sh (Nsight Compute with stall reasons, never run).
# Twenty-fifth session (H100 only): main (d53ebd8) checked whole on the H100; the
# three-stage branch lost (365.4 / 296.6 against 370.6 / 314.2 at 4,096 / 32,768) and
# is not to be run again; cuda/device_repeat.sh (PZ_REPEAT_KERNELS) measures a body's
# cost on the critical path without the skip's garbage routing. Still owed: "check" on an
# H200 (the twenty-fourth session's kernels have run only on H100s).
# repeat: where a decode step's time goes, without the skip floor's garbage routing:
#           VARIANTS="plain:.dev/pistil: dense:.dev/pistil:matvec_fused_staged_q4,
#           matvec_staged_q4 experts:.dev/pistil:expert_matvec_swiglu_shared_staged_q4
#           down:.dev/pistil:expert_matvec_combine_shared_q4 q8:.dev/pistil:matvec_q8,
#           matvec_q8_norm,router small:.dev/pistil:rms_norm,gated_rms_norm,gdn_gates,rope,
#           slice,kv_append,embed" CONTEXTS=0 bash cuda/device_repeat.sh (every kernel but
#           conv1d and gated_delta keeps the answer repeated: cuda/emu/repeatable.sh).
# Branch attn-chains ran in the twenty-sixth session (H100): level with main at every
# context (cuda/README.md), not to be run again.
# Twenty-sixth session (H100 only): matmul_mma.k's tiles without bounds tests around the
# mma (MMA_FULL_TILES, MMA_UNGUARDED; prefill +20.5% / +13.7%) passed the mma, kernel,
# plan and grid tests (153) and 14 check lines on an H100, not the whole check: "check"
# on an H200 covers it with the twenty-fourth and twenty-fifth sessions' kernels.
# Twenty-seventh session (H100 only): the branches mma-wide (merged, the pass on),
# expert-tile-headroom and delta-ahead (both lost, not merged: not to be run again) ran
# with their own binaries; the partial tiles and the two-m16 attention tiles landed; the
# whole check ran on a7ce815, and on the final tree the whole cuda.test and 109 of 124
# check lines (cuda/README.md). Still owed: "check" on an H200 (sessions 24-27).
# wide:    the wide tiles (mma-wide-rows, on by default since the twenty-seventh session):
#           registers with MMA_WIDE_MIN_GROUPS 4 / 3 / 0, the per-op tests, four check
#           lines, prefill on and off alternating (two rounds), on with 3 groups.
# Next, for issue 11 (suggested first: "check" if an H200 comes, then "pprofile splitk"):
# pprofile: where a 1,024-token chunk goes with the twenty-seventh session's kernels, at
#           depth 0 and 3,072 (cuda/device_prefill_profile.sh), and Nsight Compute's
#           stall reasons for attention_prefill_mma in two-m16 key tiles (the last chunk
#           of an 8,192-token prompt), never profiled.
# splitk:   mma-split-k off against on, alternating (two rounds): the dense matmuls it
#           gives split-k tiles (the shared experts' gate and up, k and v, 512 rows each)
#           for their small grids run beside the routed experts in their stage, so the
#           wide tiles (128 x 32, a quarter of the split per mma) may win there now.
# Twenty-eighth and twenty-ninth sessions: the chunked gated delta kernel
# (gated_delta_chunked, pass chunked-delta) ran on an H100 in the twenty-ninth (tests,
# checks, the whole device_check with it on, +2.7% at 4,096; cuda/README.md) and is on
# by default. Not yet on an H200: "check" there covers it with sessions 24-27's kernels.
# chunked:  TestGatedDeltaChunked and TestKernelsMatchReferences, pistil check on both
#           layouts (whole, chunks of 7, from decode) with the pass on, prefill 512 /
#           4,096 with it off and on (two rounds) and with GDC_PREFETCH=1: rerun after a
#           change to the kernel.
# gdcmma:   GDC_MMA=1 (the chunked kernel's products on the tensor cores, the default
#           since the thirtieth session, which ran this step on an H100): TestGatedDelta-
#           Chunked with it, pistil check on mlx-q4 whole and hf in chunks of 7, prefill
#           512 / 4,096 with GDC_MMA 0 and 1 alternating (two rounds), 4,096 at depth
#           32,768 with each, and its registers: rerun after a change to the kernel.
# f16:      MMA_F16 (the prefill GEMMs' q4 kernels with fp16 activations in two parts,
#           off by default; ran on an H100 in the thirtieth session, cuda/README.md): the
#           q4 kernels' registers with MMA_F16 0 and 1, the mma
#           per-op and lowering tests and TestKernelDefinesKeepTheAnswer, pistil check on
#           both fixtures whole, in chunks of 7 and 32 and from decode at 40, prefill 512 /
#           4,096 with MMA_F16 0 and 1 alternating (two rounds), 4,096 at depth 32,768 with
#           each.
# STEPS picks them (default "check attn floor"; "sass floor" first next time: the sass
# step has never had a machine). Logs go to $OUT; each step prints a summary.
set -u
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/full/config.json ] || ./.dev/pistil synth --preset full --layout mlx-q4 --out /tmp/full > "$OUT/synth.log" 2>&1
STEPS=${STEPS:-check attn floor}
has() { [[ " $STEPS " == *" $1 "* ]]; }
has check && { timeout 420 bash cuda/device_check.sh > "$OUT/next_check.txt" 2>&1; echo "check exit $?"; grep -E "passed|FAIL" "$OUT/next_check.txt" | head -20; }
has floor && { ROUNDS=1 timeout 300 bash cuda/device_floor.sh > "$OUT/next_floor.txt" 2>&1; echo "floor exit $?"; cat "$OUT/next_floor.txt"; }
has longctx && { ROUNDS=1 timeout 400 bash cuda/device_longctx.sh > "$OUT/next_longctx.txt" 2>&1; echo "longctx exit $?"; grep -E "^==|^decode" "$OUT/next_longctx.txt"; }
has attn && { STEPS=regs bash cuda/device_decode_attention.sh 2>&1 | grep -E "entry|regist|spill"; bash cuda/device_attn_profile.sh 2>&1 | grep -E "==|attention"; }
has pstalls && { KERNELS='regex:^attention_prefill_mma$' PROMPT=8192 SKIP=70 COUNT=3 timeout 500 bash cuda/device_stalls.sh > "$OUT/next_pstalls.txt" 2>&1; echo "pstalls exit $?"; tail -40 "$OUT/next_pstalls.txt"; }
has switches && { timeout 400 bash cuda/device_decode_switches.sh 2>&1 | tee "$OUT/next_switches.txt"; }
has h200 && { LATE=0 ROUNDS=2 CONTEXTS=0,4096,32768 timeout 500 bash cuda/device_early_loads.sh 2>&1 | tee "$OUT/next_h200.txt"; (cd cuda && timeout 300 ../.dev/cuda.test -test.run 'TestGrid' -test.count=1 -test.v > "$OUT/next_grid.txt" 2>&1; echo "TestGrid exit $?"; grep -cE -- "--- PASS: TestGrid/" "$OUT/next_grid.txt"); }
# prefill_pass_trial NAME PASS DEFINES SWITCHES...: a prefill pass that is off by default,
# tried: the mma per-op tests, pistil check on both fixtures (whole and in chunks of 32)
# with the pass and SWITCHES on, prefill 512 and 4,096 with the pass off and on
# alternating (two rounds), then on with PISTIL_CUDA_DEFINES=DEFINES.
prefill_pass_trial() {
	local name=$1 pass=$2 defines=$3
	shift 3
	(cd cuda && timeout 200 ../.dev/cuda.test -test.count=1 -test.v -test.run '^(TestMMAKernelsMatchReferences|TestMMACasesLowerToTensorCores)$' > "$OUT/next_${name}_tests.txt" 2>&1; echo "$name tests exit $? pass $(grep -c -- '--- PASS' "$OUT/next_${name}_tests.txt") fail $(grep -c -- '--- FAIL' "$OUT/next_${name}_tests.txt")")
	for layout in mlx-q4 hf; do M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 32"; do
			timeout 60 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors -pass=$pass/on "$@" $args > /tmp/c.txt 2>&1
			echo "$name check $layout $args: $? $(grep -E '^(PASS|FAIL)|^max abs' /tmp/c.txt | cut -c1-40 | tr '\n' ' ')"
		done
	done
	local B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3"
	for r in 1 2; do for v in off on; do
		echo "== round $r $pass $v"; timeout 100 ./.dev/pistil $B -pass=$pass/$v 2>&1 | grep -E '^prefill'
	done; done
	echo "== $pass on, $defines"; PISTIL_CUDA_DEFINES=$defines timeout 100 ./.dev/pistil $B -pass=$pass/on 2>&1 | grep -E '^prefill'
}
has wide && {
	./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
	# The three register reports compile on the host's cores while the GPU runs the trial.
	for g in 4 3 0; do
		(cd "$OUT" && timeout 300 nvcc -arch=sm_90 -Xptxas -v -DMMA_WIDE_MIN_GROUPS=$g -c -o /dev/null kernels.cu > "ptxas_wide$g.txt" 2>&1) &
	done
	prefill_pass_trial wide mma-wide-rows MMA_WIDE_MIN_GROUPS=3 -pass=mma-split-k/off -pass=expert-per-slot/off
	wait
	for g in 4 3 0; do
		echo "MMA_WIDE_MIN_GROUPS=$g:"; grep -A3 -E "entry function '(matmul_mma_wide_q4|expert_mma32w_q4|matmul_mma_q4|expert_mma32_q4)'" "$OUT/ptxas_wide$g.txt" | grep -E "entry|registers|spill"
	done
}
has pprofile && {
	for depth in 0 3072; do TOKENS=1024 DEPTH=$depth CHUNK_TOKENS=1024 timeout 280 bash cuda/device_prefill_profile.sh 2>&1 | head -30 | tee "$OUT/next_pprofile_$depth.txt"; done
	KERNELS='regex:^attention_prefill_mma$' PROMPT=8192 SKIP=70 COUNT=3 timeout 400 bash cuda/device_stalls.sh > "$OUT/next_pstalls.txt" 2>&1; echo "pstalls exit $?"; tail -40 "$OUT/next_pstalls.txt"
}
has splitk && {
	B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3"
	for r in 1 2; do for v in on off; do
		echo "== round $r mma-split-k $v"; timeout 100 ./.dev/pistil $B -pass=mma-split-k/$v 2>&1 | grep -E '^prefill'
	done; done
}
has chunked && {
	(cd cuda && timeout 120 ../.dev/cuda.test -test.run '^(TestGatedDeltaChunked|TestKernelsMatchReferences)$' -test.count=1 -test.v > "$OUT/next_chunked_tests.txt" 2>&1; echo "chunked tests exit $? pass $(grep -c -- '--- PASS' "$OUT/next_chunked_tests.txt") fail $(grep -c -- '--- FAIL' "$OUT/next_chunked_tests.txt")")
	for layout in mlx-q4 hf; do M=testdata/golden/tiny-s1/$layout
		for args in "" "--chunk 7" "--decode-from 40"; do
			timeout 60 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors -pass=chunked-delta/on $args > /tmp/c.txt 2>&1
			echo "chunked check $layout $args: $? $(grep -E '^(PASS|FAIL)|^max abs' /tmp/c.txt | cut -c1-40 | tr '\n' ' ')"
		done
	done
	B="bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3"
	for r in 1 2; do for v in off on; do
		echo "== round $r chunked-delta $v"; timeout 100 ./.dev/pistil $B -pass=chunked-delta/$v 2>&1 | grep -E '^prefill'
	done; done
	echo "== chunked-delta on, GDC_PREFETCH=1"; PISTIL_CUDA_DEFINES=GDC_PREFETCH=1 timeout 100 ./.dev/pistil $B -pass=chunked-delta/on 2>&1 | grep -E '^prefill'
}
# macro_trial NAME MACRO TESTS KERNELS CHECKS...: a kernel tuning macro tried: the
# registers of the KERNELS (a regex of entry names) with MACRO 0 and 1 (nvcc on the host's
# cores while the GPU runs the rest), the TESTS (a -test.run regex) with MACRO=1, pistil
# check with it on each CHECKS entry ("layout|args"), prefill 512 / 4,096 with MACRO 0
# and 1 alternating (two rounds) and 4,096 at depth 32,768 with each. The whole output
# goes to $OUT/next_NAME.txt too (a call returns only its tail).
macro_trial() {
	local name=$1 macro=$2 tests=$3 kernels=$4
	shift 4
	{
		./.dev/pistil kernels --backend cuda > "$OUT/kernels.cu"
		for v in 0 1; do (cd "$OUT" && timeout 300 nvcc -arch=sm_90 -Xptxas -v -D$macro=$v -c -o /dev/null kernels.cu > "ptxas_${name}_$v.txt" 2>&1) & done
		(cd cuda && PISTIL_CUDA_DEFINES=$macro=1 timeout 200 ../.dev/cuda.test -test.run "$tests" -test.count=1 -test.v > "$OUT/next_${name}_tests.txt" 2>&1; echo "$name tests exit $? pass $(grep -c -- '--- PASS' "$OUT/next_${name}_tests.txt") fail $(grep -c -- '--- FAIL' "$OUT/next_${name}_tests.txt")")
		for lc in "$@"; do M=testdata/golden/tiny-s1/${lc%%|*} args=${lc#*|}
			PISTIL_CUDA_DEFINES=$macro=1 timeout 90 ./.dev/pistil check --backend cuda --model $M --reference $M/reference.safetensors $args > /tmp/c.txt 2>&1
			echo "$name check ${lc%%|*} $args: $? $(grep -E '^(PASS|FAIL)|^max abs' /tmp/c.txt | cut -c1-40 | tr '\n' ' ')"
		done
		for r in 1 2; do for v in 0 1; do
			echo "== round $r $macro=$v"
			PISTIL_CUDA_DEFINES=$macro=$v timeout 100 ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 512,4096 --contexts= --repeats 3 2>&1 | grep -E '^prefill'
		done; done
		for v in 0 1; do
			echo "== $macro=$v, 4,096 on top of 32,768"
			PISTIL_CUDA_DEFINES=$macro=$v timeout 100 ./.dev/pistil bench --backend cuda --model /tmp/full --prompts 4096 --depths 32768 --contexts= --repeats 2 2>&1 | grep -E '^prefill'
		done
		wait
		for v in 0 1; do
			echo "$macro=$v:"; grep -A3 -E "entry function '($kernels)'" "$OUT/ptxas_${name}_$v.txt" | grep -E "entry|registers|spill"
		done
	} 2>&1 | tee "$OUT/next_$name.txt"
}
has gdcmma && macro_trial gdcmma GDC_MMA '^(TestGatedDeltaChunked|TestKernelsMatchReferences)$' gated_delta_chunked "mlx-q4|" "hf|--chunk 7"
has f16 && macro_trial f16 MMA_F16 '^(TestMMAKernelsMatchReferences|TestMMACasesLowerToTensorCores|TestKernelDefinesKeepTheAnswer)$' \
	'matmul_mma_q4|matmul_mma_wide_q4|matmul_mma_splitk_q4|expert_mma16_q4|expert_mma32_q4|expert_mma64_q4|expert_mma32w_q4|expert_mma_splitk_q4' \
	"mlx-q4|" "mlx-q4|--chunk 7" "mlx-q4|--chunk 32" "mlx-q4|--decode-from 40" "hf|" "hf|--chunk 7" "hf|--chunk 32" "hf|--decode-from 40"
has sass && { timeout 400 bash cuda/device_sass.sh 2>&1 | tee "$OUT/next_sass.txt"; }
has prefill && (cd cuda && PISTIL_BENCH_MODEL=/tmp/full timeout 240 ../.dev/cuda.test -test.run '^$' -test.bench 'Prefill' -test.benchtime 2x > "$OUT/next_prefill_bench.txt" 2>&1; echo "BenchmarkPrefill exit $?"; grep -E "Benchmark" "$OUT/next_prefill_bench.txt")
