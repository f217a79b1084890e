# Session 16: the quick device build of the D = 64/128 rows (bf16 and fp16, plain and bias) into
# build-s16 (sourced by s16_check.sh and the A/B call; sets B; TARGETS: what to build).
B=build-s16
if [[ ! -f $B/build.ninja ]]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_DEPS_DIR=$PWD/.deps \
    "-DMEMATTN_KERNEL_DTYPES=bf16;fp16" \
    "-DMEMATTN_KERNEL_FILTER=^(fwd|bwd)_sm80_(bf16|fp16)_d(64|128)_[^_]+_(fused_)?(btile_)?vec_(plain|bias)$" \
    -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF > $OUT/conf.log 2>&1 || { tail -20 $OUT/conf.log; exit 1; }
fi
SECONDS=0
cmake --build $B -j16 --target ${TARGETS:-memattn_cli test_cuda_backward test_tail_split} > $OUT/build.log 2>&1 \
  || { grep -m5 -A5 "error" $OUT/build.log; exit 1; }
echo "build: ${SECONDS}s"
