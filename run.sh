#!/usr/bin/env bash
# The main job: install what is missing, build, and run forward + backward on the default problem,
# verified against the float64 reference, with time and TFLOP/s. With a GPU present the CUDA
# backend is built for that GPU and used when it has a kernel for the problem (else the CPU runs
# it); without one the build is CPU-only. Extra arguments go to `memattn run`
# (e.g. ./run.sh --dtype fp16 --causal --pass fwd).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install_deps.sh --run
cuda=(-DMEMATTN_ENABLE_CUDA=OFF)
if cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) && [[ -n $cc ]]; then
  # Only this GPU's SASS, and only the kernel rows of the dtype this run asks for (bf16 unless
  # --dtype says otherwise): the whole table takes 6-7 minutes of 16 cores, a dtype's rows about
  # half of that. Another --dtype reconfigures and builds its rows.
  dtype=bf16
  for ((i = 1; i <= $#; ++i)); do
    case ${!i} in
      --dtype) j=$((i + 1)); dtype=${!j:-bf16} ;;
      --dtype=*) dtype=${!i#--dtype=} ;;
    esac
  done
  [[ $dtype == @(bf16|fp16|fp32) ]] || dtype="bf16;fp16;fp32"  # memattn run names the bad value
  cuda=(-DMEMATTN_ENABLE_CUDA=AUTO "-DMEMATTN_SM80_SASS=${cc/./}" -DMEMATTN_SM80_PTX=OFF "-DMEMATTN_KERNEL_DTYPES=$dtype")
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >/dev/null
cmake --build build --target memattn_cli
exec build/bin/memattn run --verify "$@"
