#!/usr/bin/env bash
# The whole test suite: install what is missing, build, and run CTest. With nvcc present the CUDA
# backend is built from the reduced kernel list (one row per kernel kind, so every kernel family
# compiles in minutes); GPU tests skip without a GPU. Extra arguments go to CMake (e.g. ./test.sh -DMEMATTN_KERNELS=all
# on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMATTN_KERNELS=reduced "$@" >/dev/null
cmake --build build-test
ctest --test-dir build-test --output-on-failure -j "$(nproc)"
