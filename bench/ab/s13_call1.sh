#!/usr/bin/env bash
# Session 13, call 1: the one-pass backward's step cursor carries the step's row addresses, and
# dQ's workspace is head-major so that a step's dQ tile is one block added at constant offsets
# (flush_staged_block). Tests (every 12-row-build row forced on the plain feature cases),
# sanitizers, CLI A/B, ncu instruction counts (build-run/base = HEAD, build-run/new).
set -uo pipefail
N=build-run/new
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain \
           bwd_sm80_bf16_d64_m64n64w4_fused_vec_plain bwd_sm80_bf16_d128_m64n64w4_fused_vec_plain \
           bwd_sm80_bf16_d64_m64n128w8_fused_vec_plain bwd_sm80_bf16_d128_m64n64w4_vec_plain \
           bwd_sm80_bf16_d64_m32n64w2_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-400)"
done
echo "backward suite: $(timeout 200 $N/tests/test_cuda_backward 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-600)"
for tool in memcheck racecheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*bwd*' 2>&1 | tail -1)"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 2048 --causal" \
         "--head-dim 64 --heads-q 32 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2" \
         "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2"; do
  for side in base new base new; do
    echo "bwd $side $P: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active"
for side in base new; do
  echo "== ncu $side"
  ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo "== ncu FA2"
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics "$M" \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 2>&1 | grep -E "^    [a-z]" | cut -c1-200
echo done
