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
  # Only this GPU's SASS, and only the kernel rows this run can use: its dtype (bf16 unless
  # --dtype says otherwise) and the head-dim buckets that serve its head dims (128 unless
  # --head-dim/--head-dim-v say otherwise), besides the rows that take any head dim. The whole
  # table takes about 5 minutes of 16 cores; this, about 2. Other values reconfigure and build theirs.
  dtype=bf16 d=128 dv=
  for ((i = 1; i <= $#; ++i)); do
    j=$((i + 1))
    case ${!i} in
      --dtype) dtype=${!j:-} ;;
      --dtype=*) dtype=${!i#--dtype=} ;;
      --head-dim) d=${!j:-} ;;
      --head-dim=*) d=${!i#--head-dim=} ;;
      --head-dim-v) dv=${!j:-} ;;
      --head-dim-v=*) dv=${!i#--head-dim-v=} ;;
      --load | --load=*) d=all ;;  # the problem's head dims are in its files
    esac
  done
  [[ $dtype == @(bf16|fp16|fp32) ]] || dtype="bf16;fp16;fp32"  # memattn run names the bad value
  dv=${dv:-$d}
  buckets=all
  if [[ $d =~ ^[0-9]+$ && $dv =~ ^[0-9]+$ ]]; then
    buckets=$(python3 src/cuda/kernel_table.py --dtypes "$dtype" --buckets-for $((d > dv ? d : dv)))
    buckets=${buckets:-none}  # beyond every register bucket: the any-D rows alone
  fi
  cuda=(-DMEMATTN_ENABLE_CUDA=AUTO "-DMEMATTN_SM80_SASS=${cc/./}" -DMEMATTN_SM80_PTX=OFF "-DMEMATTN_KERNEL_DTYPES=$dtype"
        "-DMEMATTN_KERNEL_HEADDIMS=$buckets")
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >/dev/null
cmake --build build --target memattn_cli
exec build/bin/memattn run --verify "$@"
