#!/usr/bin/env bash
# Session 11, call 1: the bias changes (tile copy addressing, dbias zeroing only where needed, the
# CLI's workspace) on a local build of six rows: tests, memcheck, A/B against HEAD's CLI, ncu.
set -uo pipefail
B=build-run
P="--dtype bf16 --batch 8 --seqlen-q 2048 --heads-q 16 --head-dim 128"
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$B STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_forward:Features/*bf16_* test_cuda_backward:Features/*bf16_*:WideHeads/*d120_bf16_bias*" \
  timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for f in 'Features/*bf16_bias_causal:Features/*bf16_padded_window_bias:Features/*bf16_bias_dense'; do
  timeout 120 compute-sanitizer --tool memcheck $B/tests/test_cuda_backward --gtest_filter="$f" 2>&1 | tail -2
done
timeout 120 compute-sanitizer --tool memcheck $B/tests/test_cuda_rows --gtest_filter='*btile*' 2>&1 | tail -2
for bin in $B/base/memattn $B/bin/memattn; do
  echo "== $bin"
  for pass in fwd bwd; do
    for extra in "--bias dense" "--bias dense --causal" ""; do
      echo "$pass $extra: $($bin run --backend cuda --pass $pass --iters 20 $P $extra | grep -E '^(forward|backward):')"
    done
  done
  echo "fwd S=8192 broadcast-batch: $($bin run --backend cuda --pass fwd --iters 20 --dtype bf16 --batch 2 --seqlen-q 8192 --heads-q 16 --head-dim 128 --bias broadcast-batch | grep forward:)"
done
for bin in $B/base/memattn $B/bin/memattn; do
  echo "== ncu kernel times, bwd dense bias, $bin"
  ncu --metrics gpu__time_duration.sum "$bin" run --backend cuda --pass bwd --iters 0 $P --bias dense 2>&1 |
    grep -E "^  [a-zA-Z_]|gpu__time_duration" | sed 's/(int, int, int).*//' | cut -c1-150
done
m='sass__inst_executed_per_opcode,smsp__inst_executed.sum,gpu__time_duration.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio'
ncu --kernel-name regex:fused_bwd --metrics "$m" --print-metric-instances details $B/bin/memattn run --backend cuda \
  --pass bwd --iters 0 $P --bias dense >"$OUT/ncu_bwd_bias.txt" 2>&1
ncu --kernel-name regex:fused_bwd --metrics "$m" --print-metric-instances details $B/bin/memattn run --backend cuda \
  --pass bwd --iters 0 $P >"$OUT/ncu_bwd_plain.txt" 2>&1
ncu --kernel-name regex:forward_kernel --metrics "$m" --print-metric-instances details $B/bin/memattn run --backend cuda \
  --pass fwd --iters 0 $P --bias dense >"$OUT/ncu_fwd_bias.txt" 2>&1
echo done
