#!/usr/bin/env bash
# Session 15: the bf16 D = 64/128 plain rows, the CLI, the Python package (with memattn._autograd)
# and the backward tests, built on the device into build-s15 (~65 s on 16 cores).
set -u
if [[ ! -x build-s15/bin/memattn ]]; then
  cmake -S . -B build-s15 -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_ENABLE_CUDA=ON -DMEMATTN_DEPS_DIR=$PWD/.deps \
    -DMEMATTN_KERNEL_DTYPES=bf16 "-DMEMATTN_KERNEL_FILTER=^(fwd|bwd)_sm80_bf16_d(64|128)_[^_]+_(fused_)?vec_plain$" \
    -DMEMATTN_SM80_SASS=90 -DMEMATTN_SM80_PTX=OFF > $OUT/conf.log 2>&1
fi
cmake --build build-s15 -j16 --target memattn_cli memattn_python memattn_autograd test_cuda_backward > $OUT/build.log 2>&1
echo "build: exit $?"
