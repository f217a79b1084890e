#!/usr/bin/env bash
# Session 22, call 14 (a measurement for the next session): the L2-sized causal groups on the
# forward (a temporary MEMATTN_FWD_L2=1 passes each pair's K and V bytes to work_groups), CLI
# fwd_ms at the suite's causal shapes, D = 256 (build-run/s22f) and D = 64/128 (build-run/g2f).
set -uo pipefail
one() {  # BUILD MODE D H B S
  MEMATTN_FWD_L2=$2 $1/bin/memattn run --backend cuda --pass fwd --dtype bf16 --head-dim $3 --heads-q $4 \
    --batch $5 --seqlen-q $6 --causal --iters 30 --json 2>/dev/null | grep -o '"fwd_ms":[0-9.]*' | cut -d: -f2
}
echo "verify: $(MEMATTN_FWD_L2=1 build-run/s22f/bin/memattn run --backend cuda --pass fwd --dtype bf16 --verify --iters 1 --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 --causal 2>&1 | grep -E 'result|rror' | head -1)"
for round in 1 2 3; do
  for cfg in "256 8 32 512" "256 8 16 1024" "256 8 8 2048" "256 8 2 8192"; do
    echo "round $round D/H/B/S $cfg: off $(one build-run/s22f 0 $cfg) on $(one build-run/s22f 1 $cfg)"
  done
  for cfg in "64 32 32 512" "64 32 8 2048" "128 16 32 512" "128 16 8 2048"; do
    echo "round $round D/H/B/S $cfg: off $(one build-run/g2f 0 $cfg) on $(one build-run/g2f 1 $cfg)"
  done
done
