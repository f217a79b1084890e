#!/usr/bin/env bash
# Session 14, call 4: (1) the plain rows at this tree (build-run/v2: the 12 D = 64/128 bf16 plain
# rows; only the delta kernel changed for them: four rows in flight per warp) through
# test_cuda_rows, forced feature cases, sanitizers; (2) the bias rows (build-run/bias2) against
# the float64 reference through the CLI (s14_call1.sh's cases, 304 keys for the broadcast one);
# (3) the delta kernel and the op's kernels per call: 1988ccb (bnew) against this tree.
set -uo pipefail
N=build-run/v2
mkdir -p "$OUT/t"
OUT=$OUT/t BUILD_DIR=$N STEPS="gtests" GPU_TESTS="test_cuda_rows:*" timeout 200 scripts/device_harness.sh >/dev/null 2>&1
cat "$OUT/t/summary.txt"
for row in bwd_sm80_bf16_d128_m64n128w8_fused_vec_plain bwd_sm80_bf16_d64_m128n128w8_fused_vec_plain \
           bwd_sm80_bf16_d128_m64n64w4_vec_plain bwd_sm80_bf16_d64_m64n64w4_vec_plain; do
  echo "$row: $(timeout 120 scripts/forced_row_tests.sh $row "$(scripts/plain_cases.sh bwd bf16)" $N 2>&1 | grep -E '^\[  (PASSED|FAILED) ' | tr '\n' ' ' | cut -c1-300)"
done
for tool in memcheck racecheck; do
  echo "$tool: $(timeout 150 compute-sanitizer --tool $tool $N/tests/test_cuda_rows --gtest_filter='*bwd*d128_m64n128w8_fused*:*bwd*d64_m64n64w4_vec*' 2>&1 | tail -1)"
done
echo "memcheck bias: $(MEMATTN_KERNEL=bwd_sm80_bf16_d128_m64n128w8_fused_btile_vec_bias timeout 100 compute-sanitizer --tool memcheck build-run/bias2/bin/memattn run --backend cuda --pass bwd --verify --iters 0 --dtype bf16 --batch 2 --heads-q 2 --seqlen-q 333 --seqlen-k 520 --head-dim 128 --bias dense 2>&1 | tail -2 | tr '\n' ' ')"
sed -n '/^B=/,/^echo "forced-row/p' bench/ab/s14_call1.sh > /tmp/verify.sh && bash /tmp/verify.sh
PYTHONPATH=build-run/bias2/python python3 bench/ab/s13_bias.py check
for side in bnew bias2; do
  echo "== profile $side bias"; PYTHONPATH=build-run/$side/python python3 bench/ab/s14_profile.py 2>&1 | sed -n '/^kernel/,/^GPU busy/p'
done
echo "== profile v2 plain"; PYTHONPATH=build-run/v2/python python3 bench/ab/s14_profile.py plain 2>&1 | sed -n '/^kernel/,/^GPU busy/p'
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for side in bnew bias2; do
  echo "== ncu delta $side D=128: $(ncu --clock-control none --kernel-name regex:delta_kernel --launch-count 1 --metrics "$M" \
    build-run/$side/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 128 --heads-q 16 --bias dense 2>&1 | grep -E "^    [a-z]" | awk '{print $1, $NF}' | tr '\n' ' ')"
done
echo "== ncu delta v2 D=64: $(ncu --clock-control none --kernel-name regex:delta_kernel --launch-count 1 --metrics "$M" \
    $N/bin/memattn run --backend cuda --pass bwd --iters 0 --dtype bf16 --batch 8 --seqlen-q 2048 --head-dim 64 --heads-q 32 2>&1 | grep -E "^    [a-z]" | awk '{print $1, $NF}' | tr '\n' ' ')"
for side in bnew bias2 bnew bias2; do
  echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
done
for P in "--head-dim 128 --heads-q 16 --seqlen-q 2048" "--head-dim 64 --heads-q 32 --seqlen-q 2048" \
         "--head-dim 128 --heads-q 16 --seqlen-q 8192 --batch 2"; do
  echo "bwd v2 $P: $($N/bin/memattn run --backend cuda --pass bwd --iters 30 --dtype bf16 --batch 8 $P | grep -E '^backward:')"
done
echo done
