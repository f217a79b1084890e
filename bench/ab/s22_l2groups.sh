#!/usr/bin/env bash
# Session 22, call 10: the causal work order's group shrunk where the balanced group's reused rows
# (Q, dO, dQ workspace) overflow half of L2 (dispatch.cpp, work_groups). A temporary override
# MEMATTN_L2_GROUPS (0: never, all: every one-pass row, unset: the wgmma rows) in build-run/s22g
# (D = 256 rows) and build-run/g2 (the D = 64 and 128 one-pass rows): CLI bwd_ms, then the
# suite's D = 256 S = 512 causal row through the Python package both ways.
set -uo pipefail
G=build-run/s22g G2=build-run/g2
one() {  # BUILD MODE D H B S
  MEMATTN_L2_GROUPS=$2 $1/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim $3 --heads-q $4 \
    --batch $5 --seqlen-q $6 --causal --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
echo "verify: $(MEMATTN_L2_GROUPS=all $G2/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 --head-dim 128 --heads-q 16 --batch 8 --seqlen-q 512 --causal 2>&1 | grep -E 'result|rror' | head -1) $($G/bin/memattn run --backend cuda --pass bwd --dtype bf16 --verify --iters 1 --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 --causal 2>&1 | grep -E 'result|rror' | head -1)"
echo "rows: $(timeout 100 $G/tests/test_cuda_rows --gtest_filter='*wgmma*' 2>&1 | grep -E '^\[  (PASSED|FAILED)' | tr '\n' ' ')"
for round in 1 2 3; do
  for cfg in "256 8 32 512" "256 8 16 1024" "256 8 8 2048" "256 8 2 8192"; do
    echo "round $round D/H/B/S $cfg: off $(one $G 0 $cfg) on $(one $G "" $cfg)"
  done
  for cfg in "64 32 32 512" "64 32 8 2048" "64 32 2 8192" "128 16 32 512" "128 16 8 2048" "128 16 2 8192"; do
    echo "round $round D/H/B/S $cfg: off $(one $G2 0 $cfg) on $(one $G2 all $cfg)"
  done
done
for mode in 0 "" 0 ""; do
  echo "suite L2 groups '${mode:-wgmma}': $(MEMATTN_L2_GROUPS=$mode PYTHONPATH=$G/python:bench timeout 150 python3 bench/bench.py --only 20 --passes bwd --iters 30 --out /tmp 2>&1 | grep '^| bf16' | tail -1)"
done
