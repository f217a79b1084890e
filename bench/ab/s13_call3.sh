#!/usr/bin/env bash
# Session 13, call 3: dQ of a step added during the next step's S and dP MMAs (DqBlockFlush
# parts issued between the k-slices). build-run/base = HEAD, mid = call 1's tree (cursor and
# head-major workspace, immediate block flush), new = deferred flush. Tests, sanitizers, CLI A/B,
# ncu.
set -uo pipefail
N=build-run/new
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain \
           bwd_sm80_bf16_d64_m64n64w4_fused_vec_plain bwd_sm80_bf16_d128_m64n64w4_fused_vec_plain \
           bwd_sm80_bf16_d64_m64n128w8_fused_vec_plain bwd_sm80_bf16_d128_m64n64w4_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-300)"
done
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*bwd*fused*' 2>&1 | tail -1)"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 2048 --causal" \
         "--head-dim 64 --heads-q 32 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2" \
         "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2" "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2 --causal"; do
  for side in base mid new base mid new; do
    echo "bwd $side $P: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active"
for D in "128 --heads-q 16" "64 --heads-q 32"; do
  for side in mid new; do
    echo "== ncu $side D=$D"
    ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
      build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim $D 2>&1 | grep -E "^    [a-z]" | cut -c1-200
  done
done
echo done
