#!/usr/bin/env bash
# Session 11, call 2: call 1's changes plus bias-tile rows without the global dbias path (a local
# build of six rows): tests, memcheck, A/B against HEAD's CLI, ncu, the suite's bias row and the
# PyTorch op's host time (python module built locally for Python 3.12).
set -uo pipefail
B=build-run
P="--dtype bf16 --batch 8 --seqlen-q 2048 --heads-q 16 --head-dim 128"
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$B STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_forward:Features/*bf16_* test_cuda_backward:Features/*bf16_*:WideHeads/*d120_bf16_bias*:CudaBackwardDeterminism.*" \
  timeout 240 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
timeout 150 compute-sanitizer --tool memcheck $B/tests/test_cuda_backward \
  --gtest_filter='Features/*bf16_bias_*:Features/*bf16_padded_window_bias:Features/*bf16_varlen_bias*' 2>&1 | tail -2
timeout 100 compute-sanitizer --tool racecheck $B/tests/test_cuda_rows --gtest_filter='*btile*' 2>&1 | tail -2
for bin in $B/base/memattn $B/bin/memattn; do
  echo "== $bin"
  for extra in "--bias dense" "--bias dense --causal" "--bias broadcast-batch" ""; do
    $bin run --backend cuda --pass bwd --iters 20 $P $extra | grep -E '^(  backward|backward):' | cut -c1-90
  done
done
m='sass__inst_executed_per_opcode,smsp__inst_executed.sum,gpu__time_duration.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio'
ncu --kernel-name regex:fused_bwd --metrics "$m" --print-metric-instances details $B/bin/memattn run --backend cuda \
  --pass bwd --iters 0 $P --bias dense >"$OUT/ncu_bwd_bias.txt" 2>&1
export PYTHONPATH=$PWD/build-py/python
python3 bench/bench.py --only 26 --passes fwd,bwd --out "$OUT" --commit "s11-call2" 2>&1 | tail -3
python3 bench/host_overhead.py 2>&1 | tail -14
echo done
