#!/usr/bin/env bash
# Session 14, call 1: the dense-bias backward with the bias tile's copies unrolled at constant
# offsets and the bias added in natural units (build-run/bias2) against 1988ccb (build-run/bnew,
# the same kernels as HEAD 4a2c8a4). First the new rows against the float64 reference through the
# CLI (forced rows, awkward shapes), then the suite's bias row, the CLI with dbias, ncu.
set -uo pipefail
B=build-run/bias2/bin/memattn
fail=0
verify() {  # ROW, then run arguments
  local row=$1; shift
  if out=$(MEMATTN_KERNEL=$row $B run --backend cuda --pass bwd --verify --iters 0 --dtype bf16 "$@" 2>&1); then
    echo "ok   $row $*"
  else
    echo "FAIL $row $*"; echo "$out" | tail -5; fail=1
  fi
}
R=bwd_sm80_bf16_d128_m64n128w8_fused_btile_vec_bias
verify $R --batch 2 --heads-q 4 --seqlen-q 1000 --head-dim 128 --bias dense
verify $R --batch 2 --heads-q 4 --seqlen-q 1000 --head-dim 128 --bias dense --causal
verify $R --batch 2 --heads-q 4 --heads-k 2 --seqlen-q 333 --seqlen-k 520 --head-dim 128 --bias dense --alignment bottom-right --causal
verify $R --batch 2 --heads-q 4 --seqlen-q 700 --seqlen-k 264 --head-dim 120 --bias broadcast-heads
verify $R --batch 3 --heads-q 2 --seqlen-q 304 --head-dim 128 --bias broadcast-batch --scale -0.3
verify $R --batch 1 --heads-q 2 --seqlen-q 517 --seqlen-k 136 --head-dim 128 --bias dense --window-left 40 --window-right 7
verify $R --batch 1 --heads-q 2 --varlen 100,7,513 --varlen-k 64,200,8 --head-dim 128 --bias dense
echo "forced-row checks: $([[ $fail == 0 ]] && echo all passed || echo FAILURES)"
PYTHONPATH=build-run/bias2/python python3 bench/ab/s13_bias.py check
for side in bnew bias2 bnew bias2; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for side in bnew bias2 bnew bias2; do
  echo "$side CLI dbias: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 --heads-q 16 --seqlen-q 2048 --head-dim 128 --bias dense | grep -E '^backward')"
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active"
for side in bnew bias2; do
  echo "== ncu $side (no dbias)"
  PYTHONPATH=build-run/$side/python ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    python3 bench/ab/s13_bias.py one 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo done
