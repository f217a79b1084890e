#!/usr/bin/env bash
# Session 17: the one-pass rows without the staged-dQ barrier and with P's exponentials during
# the dP GEMM (build-run/n: tests and CLI of the new tree; build-run/base: HEAD's CLI).
# Row tests and forced plain feature cases against the reference, racecheck/synccheck/memcheck on
# the changed rows, then the A/B timings (bench/ab/s17_ab.sh) with D = 256 added.
set -uo pipefail
N=build-run/n
T=$N/tests
echo "rows: $(timeout 240 $T/test_cuda_rows --gtest_filter='*bwd*' 2>&1 | grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-600)"
for row in bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain \
           bwd_sm80_bf16_d256_m64n64w8_fused_vec_plain ${EXTRA_ROWS:-}; do
  echo "$row: $(timeout 150 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) |FAILED  \]' | tr '\n' ' ' | cut -c1-500)"
done
for tool in racecheck synccheck memcheck; do
  for row in d64_m128n128w8_fused d128_m64n128w8_fused d256_m64n64w8_fused; do
    echo "$tool $row: $(timeout 100 compute-sanitizer --tool $tool $T/test_cuda_rows --gtest_filter="*bwd*${row}*" 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' | tr '\n' ' ')"
  done
done
