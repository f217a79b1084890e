#!/usr/bin/env bash
# A/B of kernel-table rows on one problem: the dispatcher's default, then each named row forced
# with `memattn run --kernel ROW`, timed by `memattn run` (median of --iters). Run on the GPU
# machine after a build (the rows must be compiled and verified in the same build: ctest -L gpu
# runs test_cuda_rows). The other overrides (--no-l2-groups, --no-tail-split) go in the flags,
# which every run gets, the default's included.
#   scripts/ab_rows.sh fwd|bwd "ROW ROW ..." [memattn run flags]
# e.g. scripts/ab_rows.sh fwd "fwd_sm80_bf16_d65536_m64n64w4_gacc_vec_full" --dtype bf16 \
#        --batch 4 --heads-q 8 --seqlen-q 4096 --head-dim 512
set -uo pipefail
bin=${MEMATTN_BIN:-build-gpu/bin/memattn}
pass=$1
rows=$2
shift 2
label=$([[ $pass == fwd ]] && echo forward || echo backward)
for row in default $rows; do
  printf "%-52s " "$row"
  forced=()
  [[ $row == default ]] || forced=(--kernel "$row")
  timeout -k 10 "${RUN_TIMEOUT:-120}" "$bin" run --backend cuda --pass "$pass" --iters "${ITERS:-20}" ${forced[@]+"${forced[@]}"} "$@" 2>&1 |
    grep -E "^$label:|error" | sed 's/  */ /g'
done
