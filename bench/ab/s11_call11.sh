#!/usr/bin/env bash
# Session 11, call 11: delta with two rows in flight per warp, clearing the one-pass rows' dQ
# workspace on the way (no memset pass): tests, memcheck, ncu kernel times, CLI (12-row build).
set -uo pipefail
B=build-run
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$B STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_backward:Features/*bf16_*:WideHeads/*bf16_*:CudaBackwardWorkspace.*:CudaBackwardDeterminism.TwentyRunsAreBitIdentical" \
  timeout 300 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
timeout 200 compute-sanitizer --tool memcheck $B/tests/test_cuda_backward \
  --gtest_filter='Features/*bf16_bias_dense:Features/*bf16_padded*:Features/*bf16_varlen*:Features/*bf16_m255_n17_dv72:Features/*bf16_all_features:Features/*bf16_single' 2>&1 | tail -1
timeout 200 compute-sanitizer --tool racecheck $B/tests/test_cuda_backward --gtest_filter='Features/*bf16_varlen:Features/*bf16_m17_n255_gqa' 2>&1 | tail -1
for P in "--head-dim 128 --heads-q 16" "--head-dim 64 --heads-q 32"; do
  echo "$P: $($B/bin/memattn run --backend cuda --pass bwd --iters 20 --dtype bf16 --batch 8 --seqlen-q 2048 $P | grep -E '^backward:')"
  ncu --metrics gpu__time_duration.sum $B/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 \
    --seqlen-q 2048 $P 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time_duration" | sed 's/(.*//' | cut -c1-100
done
echo done
