#!/usr/bin/env bash
# Session 12, call 5: dQ added to the workspace straight from the accumulator fragments
# (red.v2.f32, no staging) against the staged flush: tests, sanitizers, CLI A/B, ncu (12-row
# local builds: build-run/base = HEAD, build-run/new = the patch).
set -uo pipefail
N=build-run/new
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_backward:Features/*bf16_*:WideHeads/*bf16_*:CudaBackwardWorkspace.*:*Determin*" \
  timeout 300 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for tool in memcheck racecheck; do
  echo "$tool: $(timeout 200 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*fused*' 2>&1 | tail -1)"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 2048 --causal" \
         "--head-dim 64 --heads-q 32 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2"; do
  for side in base new; do
    echo "$side $P: $(build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_sectors_srcunit_l1_op_red.sum,lts__t_requests_srcunit_l1_op_red.sum,lts__t_sectors_op_red_lookup_hit.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed"
for side in base new; do
  echo "== ncu $side"
  ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M,sass__inst_executed_per_opcode" --print-metric-instances details \
    build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep -E "^    [a-z]" | cut -c1-2500
done
echo "== ncu FA2"
ncu --clock-control none --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 --metrics "$M,sass__inst_executed_per_opcode" --print-metric-instances details \
  python3 bench/ab/s12_one_bwd.py flash 8 16 2048 128 2>&1 | grep -E "^    [a-z]" | cut -c1-2500
echo done
