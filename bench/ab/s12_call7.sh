#!/usr/bin/env bash
# Session 12, call 7: the thread index's range restated after opaque() (opaque_thread) and the
# one-pass backward's steps advanced without a division: tests, sanitizers, CLI A/B (forward and
# backward), ncu (12-row local builds: build-run/base = HEAD, build-run/new).
set -uo pipefail
N=build-run/new
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-400)"
done
for row in fwd_sm80_bf16_d128_m128n64w4_vec_plain fwd_sm80_bf16_d64_m128n64w4_vec_plain fwd_sm80_bf16_d128_m128n64w8_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh fwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-400)"
done
for tool in memcheck racecheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows 2>&1 | tail -1)"
done
for pass in bwd fwd; do
  for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 2048 --causal" \
           "--head-dim 64 --heads-q 32 --seqlen-q 2048" "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2"; do
    for side in base new base new; do
      echo "$pass $side $P: $(build-run/$side/bin/memattn run --backend cuda --pass $pass --iters 30 --dtype bf16 --batch 8 $P | grep -E '^(backward|forward):')"
    done
  done
done
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
for side in base new; do
  echo "== ncu $side"
  ncu --clock-control none --kernel-name regex:fused_bwd_kernel --launch-count 1 --metrics "$M" \
    build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 2>&1 | grep -E "^    [a-z]" | cut -c1-200
done
echo done
