#!/usr/bin/env bash
# Session 22: DRAM and L2 traffic of the D = 256 S = 512 causal backward's three kernels (delta,
# one-pass, dQ conversion), main (build-run/s22) against the K/V L2 prefetch (build-run/s22p):
# where the workspace's trips through DRAM stand against the kernels' time.
set -uo pipefail
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed"
for n in build-run/s22 build-run/s22p; do
  for c in --causal ""; do
    echo "== $n $c"
    timeout 200 ncu --metrics $M --launch-skip 3 --launch-count 3 $n/bin/memattn run --backend cuda --pass bwd --dtype bf16 \
      --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 $c --iters 2 2>&1 | grep -E "^  [a-z_]+.*\(|gpu__time|dram__|lts__" | sed 's/  */ /g'
  done
done
