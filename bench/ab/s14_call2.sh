#!/usr/bin/env bash
# Session 14, call 2: the broadcast-bias check call 1 got wrong (Mk 300: rows not 16-byte aligned,
# no bias-tile row fits; now 304), and where the op's backward spends the ~0.6 ms around the
# one-pass kernel (torch.profiler, s14_profile.py), bias and plain rows, base and new.
set -uo pipefail
B=build-run/bias2/bin/memattn
MEMATTN_KERNEL=bwd_sm80_bf16_d128_m64n128w8_fused_btile_vec_bias $B run --backend cuda --pass bwd --verify --iters 0 \
  --dtype bf16 --batch 3 --heads-q 2 --seqlen-q 304 --head-dim 128 --bias broadcast-batch --scale -0.3 2>&1 | tail -4
for side in bnew bias2; do
  echo "== $side bias"; PYTHONPATH=build-run/$side/python python3 bench/ab/s14_profile.py 2>&1 | head -40
done
echo "== bias2 plain"; PYTHONPATH=build-run/bias2/python python3 bench/ab/s14_profile.py plain 2>&1 | head -25
