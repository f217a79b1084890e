#!/usr/bin/env bash
# Session 22, call 13: the suite's D = 256 S = 512 rows, four times each with the L2-sized work
# groups (f597495's rule) and without (MEMATTN_L2_GROUPS=0), alternating (build-run/s22g).
set -uo pipefail
for i in 1 2 3 4; do
  for mode in "" 0; do
    echo "L2 groups '${mode:-on}': $(MEMATTN_L2_GROUPS=$mode PYTHONPATH=build-run/s22g/python:bench timeout 150 python3 bench/bench.py --only 16,20 --passes bwd --iters 30 --out /tmp 2>&1 | grep '^| bf16' | cut -d'|' -f5,7-8,11,14-15 | tr '\n' ' ')"
  done
done
