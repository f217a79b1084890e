#!/usr/bin/env bash
# The whole test suite: install what is missing, build, and run CTest. With nvcc present the CUDA
# backend is built from the reduced kernel list (one row per kernel kind, so every kernel family
# compiles in minutes); GPU tests skip without a GPU. Extra arguments go to CMake (e.g. ./test.sh -DMEMATTN_KERNELS=all
# on a GPU machine). Then scripts/python_tests.sh: the PyTorch op's tests on CPU tensors against
# the newest torch and the oldest that pyproject.toml claims, each installed from PyPI into a
# virtual environment under build-test/. Then scripts/sanitizers.sh: the CPU suite under
# ASan+UBSan with GCC and clang, and bounded libFuzzer runs.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
# Without a GPU nothing runs the kernels, only their compile is tested: the sm80 family then gets
# sm_80 SASS alone instead of sm_80 and sm_90 SASS and compute_80 PTX (three compiles of each of
# its units: 31 of the 50 core-minutes of CI's build). sm_80, because the builds on the H100/H200
# compile sm_90's (their code paths differ where a kernel asks for sm_90 instructions). With a GPU,
# the CMake defaults (a build folder's earlier choice removed from its cache).
if nvidia-smi -L >/dev/null 2>&1; then
  targets=(-UMEMATTN_SM80_SASS -UMEMATTN_SM80_PTX)
else
  targets=(-DMEMATTN_SM80_SASS=80 -DMEMATTN_SM80_PTX=OFF)
fi
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_KERNELS=reduced "${targets[@]}" "$@" >/dev/null
cmake --build build-test
ctest --test-dir build-test --output-on-failure -j "$(nproc)"
# MEMATTN_PYTHON_TESTS=0 skips the Python tests (two torch environments of ~4.5 GB, one at a time).
if [[ ${MEMATTN_PYTHON_TESTS:-1} != 0 ]]; then
  scripts/python_tests.sh
fi
# The CPU test suite under ASan+UBSan (GCC and clang) and bounded fuzz runs;
# MEMATTN_SANITIZERS=0 skips them for a quick local run (CI runs everything).
if [[ ${MEMATTN_SANITIZERS:-1} != 0 ]]; then
  scripts/sanitizers.sh
fi
