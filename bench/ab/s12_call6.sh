#!/usr/bin/env bash
# Session 12, call 6: dQ leaving the one-pass rows by bulk reductions (family-90 copies of the
# fused rows) against HEAD's staged atomics: tests (rows, forced-row feature cases), sanitizers,
# CLI A/B, ncu; the op without the LSE's zero gradient (12+4-row local builds).
set -uo pipefail
N=build-run/new
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in bwd_sm90_bf16_d128_m64n128w8_fused_vec_plain bwd_sm90_bf16_d64_m128n128w8_fused_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*sm90*fused*' 2>&1 | tail -1)"
done
echo "memcheck forced d128: $(MEMATTN_KERNEL=bwd_sm90_bf16_d128_m64n128w8_fused_vec_plain timeout 150 compute-sanitizer --tool memcheck $N/tests/test_cuda_backward --gtest_filter='Features/*bf16_m255_n17_dv72:Features/*bf16_varlen*:Features/*bf16_causal_br*:Features/*bf16_mqa' 2>&1 | tail -1)"
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 2048 --causal" \
         "--head-dim 64 --heads-q 32 --seqlen-q 2048" "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2" \
         "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2"; do
  for side in base new; do
    echo "$side $P: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_sectors_op_red_lookup_hit.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
echo "== ncu new D128"
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
  $N/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep -E "^  [a-z]|^    [a-z]" | cut -c1-200
ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics sass__inst_executed_per_opcode --print-metric-instances details \
  $N/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 > "$OUT/opcodes_new.txt" 2>&1
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics sass__inst_executed_per_opcode --print-metric-instances details \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 > "$OUT/opcodes_fa2.txt" 2>&1
for side in base new; do
  echo "== python $side"
  PYTHONPATH=build-run/$side/python:bench timeout 100 python3 bench/ab/s12_engine.py 2>&1 | grep -v -i warn
done
echo done
