#!/usr/bin/env bash
# Session 16, the last-wave split (tail_split.hpp): a quick device build of the D = 64/128 rows
# (bf16 and fp16, plain and bias) into build-s16, the split's tests and the sanitizers on them,
# then old (BASE, a binary of the previous commit) against new on the suite's non-causal shapes
# and on the whole-wave controls of s16_tail.sh. Usage: BASE=build-run/s16/memattn bench/ab/s16_check.sh
set -u
BASE=${BASE:-build-run/s16/memattn}
B=build-s16
source bench/ab/s16_build.sh || exit 1
$B/tests/test_tail_split 2>&1 | tail -2
# A hang would show here first: split problems through the CLI, each under a timeout.
for cfg in "128 16 2 8192" "64 32 8 2048" "128 137 1 1000"; do
  set -- $cfg
  echo "probe D=$1 H=$2 B=$3 S=$4: $(timeout 30 $B/bin/memattn run --backend cuda --pass bwd --dtype bf16 --batch $3 \
    --seqlen-q $4 --heads-q $2 --head-dim $1 --iters 3 --json | grep -o 'split over [0-9]* CTAs\|"bwd_ms":[0-9.]*' | tr "\n" " ")"
done
MEMATTN_TEST_VERBOSE=1 timeout 300 $B/tests/test_cuda_backward --gtest_filter='*TailSplit*:*OnePass*d120*:*OnePassRows*' > $OUT/gtest.log 2>&1
echo "gtests: exit $? ($(grep -c '^\[       OK' $OUT/gtest.log) ok, $(grep -c '^\[  FAILED' $OUT/gtest.log) failed lines)"
grep -E "FAILED|split over|Failure" $OUT/gtest.log | head -20
for tool in memcheck racecheck synccheck; do  # a split problem (5 tiles past a wave, 4 parts each)
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B/bin/memattn run --backend cuda --pass bwd \
    --dtype bf16 --batch 1 --seqlen-q 1000 --seqlen-k 40 --heads-q 137 --head-dim 128 --iters 0 > $OUT/sanitize_$tool.log 2>&1
  echo "$tool: exit $? $(grep -m1 'ERROR SUMMARY' $OUT/sanitize_$tool.log) $(grep -o 'split over [0-9]* CTAs' $OUT/sanitize_$tool.log | head -1)"
done
run() {  # BIN D H B S
  $1 run --backend cuda --pass bwd --dtype bf16 --batch $4 --seqlen-q $5 --heads-q $3 --head-dim $2 --iters 20 --json \
    | grep -o 'bwd_sm[0-9a-z_]*\|split over [0-9]* CTAs\|"bwd_ms":[0-9.]*\|"bwd_tflops":[0-9.]*' | sort -u | tr '\n' ' '
}
for round in 1 2; do
  for cfg in "128 16 2 8192" "128 16 1 16384" "64 32 2 8192" "64 32 1 16384" "64 32 8 2048" "128 16 8 2048" \
             "128 33 1 8192" "64 66 1 8192"; do
    set -- $cfg
    echo "round $round D=$1 H=$2 B=$3 S=$4 base: $(run $BASE $@)"
    echo "round $round D=$1 H=$2 B=$3 S=$4 new:  $(run $B/bin/memattn $@)"
  done
done
$B/bin/memattn kernels --backend cuda --batch 2 --seqlen-q 8192 --heads-q 16 --head-dim 128 2>&1 | tail -2
