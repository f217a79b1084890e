#!/usr/bin/env bash
# The whole test suite: install what is missing, build (with the CUDA backend when nvcc is
# there, so every kernel family compiles; GPU tests skip without a GPU), and run CTest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build-test
ctest --test-dir build-test --output-on-failure -j "$(nproc)"
