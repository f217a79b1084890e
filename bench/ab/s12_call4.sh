#!/usr/bin/env bash
# Session 12, call 4: ncu, our one-pass backward kernel against FA2's (SDPA FLASH), same problem
# (B 8 H 16 S 2048 D 128 bf16) and the same tile (64 queries x 128 keys, 8 warps).
set -uo pipefail
B=build-run/base
M="gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_requests_srcunit_l1_op_red.sum,lts__t_sectors_srcunit_l1_op_red.sum,dram__bytes.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_global_red.sum,smsp__inst_executed_op_ldgsts.sum"
S="regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
echo "== ours"
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M,$S" \
  $B/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep -vE "^==PROF==|^  *$" | grep -E "  [a-z]" | awk '$NF != "0" && $NF != "0.00"'
echo "== FA2"
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics "$M,$S" \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 2>&1 | grep -vE "^==PROF==|^  *$" | grep -E "  [a-z]" | awk '$NF != "0" && $NF != "0.00"'
echo "== opcodes ours"
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics sass__inst_executed_per_opcode --print-metric-instances details \
  $B/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep sass__inst | tr ',' '\n' | head -80
echo "== opcodes FA2"
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics sass__inst_executed_per_opcode --print-metric-instances details \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 2>&1 | grep sass__inst | tr ',' '\n' | head -80
