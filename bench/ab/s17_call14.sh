#!/usr/bin/env bash
# Session 17, call 14: the D = 64 one-pass kernel at bdcacb5 (build-run/f) against FA2's main
# kernel under ncu at B 8 H 32 S 2048 (the counters of call 1).
set -uo pipefail
ARGS="run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 64 --heads-q 32"
M="gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
for who in ours fa2; do
  if [[ $who == fa2 ]]; then K=regex:flash_bwd_dq_dk_dv; CMD="python3 bench/ab/s12_one_bwd.py flash 8 32 2048 64";
  else K=regex:fused_bwd_kernel; CMD="build-run/f/bin/memattn $ARGS"; fi
  echo "== ncu $who"
  timeout 120 ncu --clock-control none --kernel-name $K --launch-count 1 --metrics "$M" $CMD 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
