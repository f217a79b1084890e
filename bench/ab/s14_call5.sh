#!/usr/bin/env bash
# Session 14, call 5: the delta kernel with lane groups sized to the row (16 lanes per row at
# D = 64) and the forward's register rows in natural score units (scale * s + bias, log2(e) in the
# softmax's FFMA). build-run/v2: the 12 D = 64/128 bf16 plain rows; build-run/bias2: the D = 128
# bias rows; build-run/bnew: 1988ccb's bias rows (the same kernels as HEAD).
set -uo pipefail
N=build-run/v2
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in fwd_sm80_bf16_d128_m128n64w4_vec_plain fwd_sm80_bf16_d64_m128n64w4_vec_plain fwd_sm80_bf16_d128_m128n64w8_vec_plain \
           bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain \
           bwd_sm80_bf16_d128_m64n64w4_vec_plain bwd_sm80_bf16_d64_m64n64w4_vec_plain; do
  pass=${row%%_*}
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh $pass bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-300)"
done
for tool in memcheck racecheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*d128_m128n64w4*:*bwd*d64_m128n128w8_fused*:*bwd*d64_m64n64w4_vec*' 2>&1 | tail -1)"
done
sed -n '/^B=/,/^echo "forced-row/p' bench/ab/s14_call1.sh | sed 's/--pass bwd/--pass both/' > /tmp/verify.sh && bash /tmp/verify.sh
PYTHONPATH=build-run/bias2/python python3 bench/ab/s13_bias.py check
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for P in "--head-dim 64 --heads-q 32" "--head-dim 128 --heads-q 16" "--head-dim 72 --heads-q 16"; do
  echo "== ncu delta v2 $P: $(ncu --clock-control none --kernel-name regex:delta_kernel --launch-count 1 --metrics "$M" \
    $N/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 $P 2>&1 | grep -E "^    [a-z]" | awk '{print $1, $NF}' | tr '\n' ' ')"
done
for side in bnew bias2 bnew bias2; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for C in "" "--causal"; do
  for side in bnew bias2 bnew bias2; do
    echo "fwd bias $C $side: $(build-run/$side/bin/memattn run --backend cuda --pass fwd --iters 30 --dtype bf16 --batch 8 --heads-q 16 --seqlen-q 2048 --head-dim 128 --bias dense $C | grep -E '^forward:')"
  done
done
echo "== ncu fwd bias"
M="gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread"
for side in bnew bias2; do
  echo "$side: $(ncu --clock-control none --kernel-name regex:forward_kernel --launch-count 1 --metrics "$M" \
    build-run/$side/bin/memattn run --backend cuda --pass fwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 --bias dense 2>&1 | grep -E "^    [a-z]" | awk '{print $1, $NF}' | tr '\n' ' ')"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 64 --heads-q 32 --seqlen-q 2048" \
         "--head-dim 64 --heads-q 32 --seqlen-q 8192 --batch 2" "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2"; do
  echo "bwd v2 $P: $($N/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
  echo "fwd v2 $P: $($N/bin/memattn run --backend cuda --pass fwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^forward:')"
done
echo done
