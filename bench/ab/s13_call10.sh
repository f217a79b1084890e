#!/usr/bin/env bash
# Session 13, call 10: the dense-bias one-pass row with the next step's bias fetched right after the
# step's P and dS are in (bnew2; no dbias), against 1988ccb (bnew) and e1ada92 (bbase): the
# suite's bias row (no dbias) through the op, the CLI with dbias (control), ncu.
set -uo pipefail
for side in bbase bnew bnew2 bbase bnew bnew2; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for side in bbase bnew bnew2 bbase bnew bnew2; do
  echo "$side CLI dbias: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 --heads-q 16 --seqlen-q 2048 --head-dim 128 --bias dense | grep -E '^backward')"
done
for side in bbase bnew2; do echo "$side check: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py check 2>&1 | tr "\n" " ")"; done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"
for side in bbase bnew bnew2; do
  echo "== ncu $side (no dbias)"
  PYTHONPATH=build-run/$side/python ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    python3 bench/ab/s13_bias.py one 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo done
