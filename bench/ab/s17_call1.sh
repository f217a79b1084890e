#!/usr/bin/env bash
# Session 17, call 1: the synchronised backward's host-exposed time per layer at the suite's
# shapes (s17_host.py), and the D = 64 one-pass kernel against FA2's main kernel under ncu
# (stall reasons, instructions by opcode, per-SASS-instruction samples) at B 8 H 32 S 2048.
set -uo pipefail
R=build-run/s17
export PYTHONPATH=$R/python:bench
timeout 200 python3 bench/ab/s17_host.py 2,32,8192,64 8,32,2048,64 2,16,8192,128 2>&1
ARGS="run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 64 --heads-q 32"
for i in 1 2; do echo "cli: $($R/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 2 --seqlen-q 8192 --head-dim 64 --heads-q 32 2>&1 | grep -E '^backward:')"; done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_sectors_op_red.sum,smsp__warps_active.avg.per_cycle_active"
for who in ours fa2; do
  if [[ $who == fa2 ]]; then K=regex:flash_bwd_dq_dk_dv; CMD="python3 bench/ab/s12_one_bwd.py flash 8 32 2048 64";
  else K=regex:fused_bwd_kernel; CMD="$R/bin/memattn $ARGS"; fi
  echo "== ncu $who"
  timeout 120 ncu --clock-control none --kernel-name $K --launch-count 1 --metrics "$M" $CMD 2>&1 | grep -E "^    [a-z]" | cut -c1-200
  timeout 120 ncu --clock-control none --kernel-name $K --launch-count 1 --metrics sass__inst_executed_per_opcode \
    --print-metric-instances details $CMD > "$OUT/opcodes_$who.txt" 2>&1
done
timeout 150 ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --section SourceCounters \
  --section WarpStateStats -o "$OUT/ours" -f $R/bin/memattn $ARGS > /dev/null 2>&1
ncu -i "$OUT/ours.ncu-rep" --page source --print-source sass --csv > "$OUT/ours_source.csv" 2> "$OUT/ours_source.err"
ls -la "$OUT"
echo done
