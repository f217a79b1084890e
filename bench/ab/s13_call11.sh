#!/usr/bin/env bash
# Session 13, call 11: diagnosis for the next session (1988ccb). (a) The dense-bias one-pass row
# (no dbias, through the op: build-run/bnew) per SASS instruction (ncu SourceCounters); (b) the
# causal D = 128 S = 2048 backward, ours (build-run/new2) against FA2's kernel.
set -uo pipefail
PYTHONPATH=build-run/bnew/python ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 \
  --section SourceCounters -o "$OUT/bias" -f python3 bench/ab/s13_bias.py one > /dev/null 2>&1
ncu -i "$OUT/bias.ncu-rep" --page source --print-source sass --csv > "$OUT/bias_source.csv" 2>&1
ls -la "$OUT"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,sm__cycles_elapsed.max"
echo "== ncu ours causal"
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
  build-run/new2/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 --causal 2>&1 | grep -E "^    [a-z]" | cut -c1-200
echo "== ncu FA2 causal"
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics "$M" \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 causal 2>&1 | grep -E "^    [a-z]" | cut -c1-200
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --section SourceCounters -o "$OUT/causal" -f \
  build-run/new2/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 --causal > /dev/null 2>&1
ncu -i "$OUT/causal.ncu-rep" --page source --print-source sass --csv > "$OUT/causal_source.csv" 2>&1
rm -f "$OUT"/*.ncu-rep
echo done
