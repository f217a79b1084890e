#!/usr/bin/env bash
# Session 22, call 9: the causal work order's group size (dispatch.cpp, work_groups: a group of
# ceil(scale * resident / tiles) pairs, scale 2 on main; 0: no groups, one pair after another)
# against the one-pass kernel's L2 working set (~1 MB of Q, dO and dQ rows per pair in flight at
# D = 256 S = 512). A build with the temporary MEMATTN_GROUP_SCALE override (build-run/s22g).
set -uo pipefail
N=build-run/s22g
one() {  # SCALE B S
  MEMATTN_GROUP_SCALE=$1 $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 \
    --batch $2 --seqlen-q $3 --causal --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*' | cut -d: -f2
}
for round in 1 2 3; do
  for cfg in "32 512" "16 1024" "8 2048" "2 8192"; do
    echo "round $round B/S $cfg causal: scale 2 $(one 2 $cfg) | 1 $(one 1 $cfg) | 0.5 $(one 0.5 $cfg) | 4 $(one 4 $cfg) | none $(one 0 $cfg)"
  done
done
ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct --launch-skip 3 --launch-count 3 \
  -k regex:fused $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch 32 \
  --seqlen-q 512 --causal --iters 2 2>&1 | grep -E "gpu__time|dram__bytes|hit" | head -3
for sc in 1 0.5 0; do
  echo "scale $sc:"; MEMATTN_GROUP_SCALE=$sc ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct \
    --launch-skip 3 --launch-count 3 -k regex:fused $N/bin/memattn run --backend cuda --pass bwd --dtype bf16 --head-dim 256 \
    --heads-q 8 --batch 32 --seqlen-q 512 --causal --iters 2 2>&1 | grep -E "gpu__time|dram__bytes|hit" | head -3
done
