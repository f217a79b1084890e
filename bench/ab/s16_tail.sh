#!/usr/bin/env bash
# Session 16: does the backward's last wave cost what the model says? Kernel-bound problems whose
# CTA counts are just above a whole number of waves (2048 = 15.5 x 132, 4096 = 31.03 x 132) against
# ones at a whole number (2112 = 16 x 132, 4224 = 32 x 132): with a tail, time per head is ~3% lower
# for the whole-wave problem; without one, equal. Usage: bench/ab/s16_tail.sh BIN
set -u
BIN=${1:-build-run/s16/memattn}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
for round in 1 2; do
  for cfg in "128 32" "128 33" "128 31" "128 34" "64 64" "64 66" "64 65"; do
    set -- $cfg
    echo "round $round D=$1 H=$2: $($BIN run --backend cuda --pass bwd --dtype bf16 --batch 1 --seqlen-q 8192 --heads-q $2 --head-dim $1 --iters 20 --json)"
  done
done
