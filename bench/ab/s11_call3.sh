#!/usr/bin/env bash
# Session 11, call 3. A: bias-tile rows that write a broadcast dbias from registers (12-row local
# build, build-run): tests, sanitizers, A/B against HEAD's CLI. B: the wide forward with tile n's
# scores overlapping tile n + 1's P V (build-w-run): tests with the rows forced, sanitizers, A/B.
set -uo pipefail
P="--dtype bf16 --batch 8 --seqlen-q 2048 --heads-q 16 --head-dim 128"
B=build-run
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a BUILD_DIR=$B STEPS="gtests" \
  GPU_TESTS="test_cuda_rows:* test_cuda_forward:Features/*bf16_* test_cuda_backward:Features/*bf16_*:WideHeads/*bf16_bias*:CudaBackwardDeterminism.TwentyRunsAreBitIdentical" \
  timeout 240 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/a/summary.txt"
timeout 150 compute-sanitizer --tool memcheck $B/tests/test_cuda_backward \
  --gtest_filter='Features/*bf16_bias_*:Features/*bf16_padded_window_bias:Features/*bf16_varlen_bias*:Features/*bf16_all_features' 2>&1 | tail -1
timeout 100 compute-sanitizer --tool racecheck $B/tests/test_cuda_rows --gtest_filter='*btile*' 2>&1 | tail -1
for bin in $B/base/memattn $B/bin/memattn; do
  echo "== $bin"
  for extra in "--bias dense" "--bias dense --causal" "--bias broadcast-batch" "--bias broadcast-heads" "--bias dense --deterministic"; do
    echo "$extra: $($bin run --backend cuda --pass bwd --iters 20 $P $extra | grep -E '^(  backward|backward):' | cut -c1-75 | tr '\n' ' ')"
  done
done
W=build-w-run
OUT=$OUT/b BUILD_DIR=$W STEPS="gtests" GPU_TESTS="test_cuda_rows:*wide*" timeout 120 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/b/summary.txt"
for row in fwd_sm80_bf16_d512_m64n64w8_wide_vec_plain fwd_sm90_bf16_d768_m64n64w8_widex2_vec_plain fwd_sm90_bf16_d1024_m64n64w8_widex2_vec_plain; do
  echo "forced $row: $(timeout 150 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh fwd bf16)" $W 2>&1 | grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool $W/tests/test_cuda_rows --gtest_filter='*wide*' 2>&1 | tail -1
done
for bin in $W/base/memattn $W/bin/memattn; do
  echo "== $bin"
  for extra in "--head-dim 512 --heads-q 8" "--head-dim 1024 --heads-q 4" "--head-dim 1024 --heads-q 4 --causal" "--head-dim 768 --heads-q 4" "--head-dim 512 --heads-q 8 --causal"; do
    echo "$extra: $($bin run --backend cuda --pass fwd --iters 20 --dtype bf16 --batch 4 --seqlen-q 4096 $extra | grep -E '^forward:')"
  done
done
echo done
