#!/usr/bin/env bash
# The main job: install what is missing, build, and run forward + backward on the default problem,
# verified against the float64 reference, with time and TFLOP/s. It runs on the GPU when there
# is one (and the CUDA backend has a kernel for the problem), else on the CPU. Extra arguments go
# to `memattn run` (e.g. ./run.sh --dtype fp16 --causal).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target memattn_cli
exec build/bin/memattn run --verify "$@"
