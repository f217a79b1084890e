#!/usr/bin/env bash
# Session 13, call 9: the dense-bias rows (bwd_sm80_bf16_d128_m64n128w8_fused_btile_vec_bias and
# its forward), HEAD a4cab10-equivalent (build-run/bbase) against 1988ccb (build-run/bnew): the
# suite's bias row (no dbias) through the op, the CLI with dbias, ncu of the one-pass kernel.
set -uo pipefail
for side in bbase bnew bbase bnew; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for side in bbase bnew bbase bnew; do
  echo "$side CLI dbias: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 --heads-q 16 --seqlen-q 2048 --head-dim 128 --bias dense | grep -E '^backward')"
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"
for side in bbase bnew; do
  echo "== ncu $side (no dbias)"
  PYTHONPATH=build-run/$side/python ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    python3 bench/ab/s13_bias.py one 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo done
