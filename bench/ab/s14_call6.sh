#!/usr/bin/env bash
# Session 14, call 6: the delta kernel with a compile-time lane group (16 lanes per row up to
# D = 64, else 32) and two CTAs per SM (128 registers): tests of the plain rows (build-run/v2), the
# bias rows through the CLI (build-run/bias2), the delta kernel's time (ncu), op timings.
set -uo pipefail
N=build-run/v2
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in fwd_sm80_bf16_d128_m128n64w4_vec_plain bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain \
           bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain bwd_sm80_bf16_d64_m64n64w4_vec_plain; do
  pass=${row%%_*}
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh $pass bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-300)"
done
echo "memcheck: $(timeout 150 compute-sanitizer --tool memcheck $N/tests/test_cuda_rows --gtest_filter='*bwd*d64_m128n128w8_fused*:*bwd*d128_m64n64w4_vec*' 2>&1 | tail -1)"
sed -n '/^B=/,/^echo "forced-row/p' bench/ab/s14_call1.sh | sed 's/--pass bwd/--pass both/' > /tmp/verify.sh && bash /tmp/verify.sh
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread"
for P in "--head-dim 64 --heads-q 32" "--head-dim 128 --heads-q 16" "--head-dim 72 --heads-q 16" "--head-dim 40 --heads-q 32"; do
  echo "== ncu delta v2 $P: $(ncu --clock-control none --kernel-name regex:delta_kernel --launch-count 1 --metrics "$M" \
    $N/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 $P 2>&1 | grep -E "^    [a-z]" | awk '{print $1, $NF}' | tr '\n' ' ')"
done
for side in bnew bias2 bnew bias2; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 64 --heads-q 32 --seqlen-q 2048" \
         "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2"; do
  echo "bwd v2 $P: $($N/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
done
echo done
