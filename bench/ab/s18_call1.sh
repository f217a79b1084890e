#!/usr/bin/env bash
# Session 18, call 1: where the D = 256 backward's time goes at S = 512 (B 32 H 8) against
# S = 2048 (B 8 H 8): every kernel of one backward (ncu durations), for memattn, FA2 and cuDNN,
# then the one-pass kernel's counters at both lengths.
set -uo pipefail
BIN=${BIN:-build-run/s18/bin/memattn}
args() { echo "run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch $1 --seqlen-q $2 --heads-q 8 --head-dim 256 ${3:-}"; }
for cfg in "32 512" "32 512 --causal" "8 2048"; do
  set -- $cfg
  echo "== memattn B=$1 S=$2 ${3:-}: every kernel (forward first)"
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv $BIN $(args $@) 2>/dev/null \
    | python3 -c "
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 10]
h = rows[0]; k = h.index('Kernel Name'); m = h.index('Metric Name'); v = h.index('Metric Value')
for r in rows[1:]: print(f'  {r[k][:90]:90s} {r[m]:28s} {r[v]}')"
  for peer in flash cudnn; do
    echo "== $peer B=$1 S=$2 ${3:-}"
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      python3 bench/ab/s12_one_bwd.py $peer $1 8 $2 256 ${3:+causal} 2>/dev/null | python3 -c "
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if len(r) > 10]
h = rows[0]; k = h.index('Kernel Name'); v = h.index('Metric Value')
for r in rows[1:]: print(f'  {r[k][:90]:90s} {r[v]}')" | tail -8
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,sm__cycles_active.avg,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,lts__t_sectors_op_red.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
for cfg in "32 512" "8 2048"; do
  set -- $cfg
  echo "== ncu one-pass kernel B=$1 S=$2"
  timeout 120 ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    $BIN $(args $@) 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo done
