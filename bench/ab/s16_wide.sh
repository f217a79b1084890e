#!/usr/bin/env bash
# Session 16: the last-wave split on the D = 256 and D = 512 (sm80 32 x 32) one-pass rows: a quick
# bf16 build of the D = 64-512 plain rows into build-s16w, the split test against the reference,
# and memcheck/racecheck on a split problem of each row.
set -u
B=build-s16w
if [[ ! -f $B/build.ninja ]]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_DEPS_DIR=$PWD/.deps \
    -DMEMATTN_KERNEL_DTYPES=bf16 "-DMEMATTN_KERNEL_FILTER=^(fwd|bwd)_sm80_bf16_d(64|128|256|512)_[^_]+_((fused|wide)_)?vec_plain$" \
    -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF > $OUT/conf.log 2>&1 || { tail -20 $OUT/conf.log; exit 1; }
fi
SECONDS=0
cmake --build $B -j16 --target memattn_cli test_cuda_backward > $OUT/build.log 2>&1 || { grep -m5 -A5 "error" $OUT/build.log; exit 1; }
echo "build: ${SECONDS}s"
MEMATTN_TEST_VERBOSE=1 timeout 400 $B/tests/test_cuda_backward --gtest_filter='*TailSplit*' > $OUT/gtest.log 2>&1
echo "split test: exit $?"; grep -E "OK \]|FAILED|Failure|rel " $OUT/gtest.log | tail -12
for row in "bwd_sm80_bf16_d256_m64n64w8_fused_vec_plain 256 520 40" "bwd_sm80_bf16_d512_m32n32w8_fused_vec_plain 512 300 20"; do
  set -- $row
  for tool in memcheck racecheck; do
    MEMATTN_KERNEL=$1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B/bin/memattn run --backend cuda \
      --pass bwd --dtype bf16 --batch 1 --seqlen-q $3 --seqlen-k $4 --heads-q 135 --head-dim $2 --iters 0 > $OUT/san_$2_$tool.log 2>&1
    echo "D=$2 $tool: exit $? $(grep -m1 'SUMMARY' $OUT/san_$2_$tool.log) $(grep -o 'split over [0-9]* CTAs' $OUT/san_$2_$tool.log | head -1)"
  done
done
