#!/usr/bin/env bash
# Session 17: two CLI builds A and B alternating on the suite's D = 64/128 backward rows
# (median of 30 calls each), then ncu's counters of both one-pass kernels at D = 64 S = 2048.
# Usage: [CFGS='D,H,B,S[,--causal] ...' (instead of the default list)] [EXTRA_CFGS='D,H,B,S[,--causal] ...'] [NCU=0] bench/ab/s17_ab.sh A_BIN B_BIN [rounds]
set -u
A=$1; B=$2; ROUNDS=${3:-3}
one() {  # BIN D H B S [--causal]
  local bin=$1; shift
  $bin run --backend cuda --pass bwd --dtype bf16 --head-dim $1 --heads-q $2 --batch $3 --seqlen-q $4 ${5:-} \
    --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in $(seq $ROUNDS); do
  for cfg in ${CFGS:-64,32,2,8192 64,32,1,16384 64,32,8,2048 128,16,2,8192 128,16,8,2048 128,16,1,16384,--causal \
                   64,32,2,8192,--causal} ${EXTRA_CFGS:-}; do
    set -- ${cfg//,/ }
    a=$(one $A $@); b=$(one $B $@)
    echo "round $round D=$1 H=$2 B=$3 S=$4 ${5:-}: A $a ms, B $b ms, A/B $(python3 -c "print(f'{$a/$b:.4f}')")"
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors_op_red.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed"
[[ ${NCU:-1} == 0 ]] && exit 0
for bin in $A $B; do
  echo "== ncu $bin"
  timeout 120 ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    $bin run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 64 --heads-q 32 2>&1 \
    | grep -E "^    [a-z]" | cut -c1-200
done
