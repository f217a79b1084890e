#!/usr/bin/env bash
# Session 17, call 15: the suite's D = 64/128 backward rows through the op at e36d96e (build-run/py:
# bf16 D = 64/128 rows, Python 3.12), two rounds, each against SDPA in the same process.
set -uo pipefail
cd bench
for round in 1 2; do
  mkdir -p "$OUT/r$round"
  PYTHONPATH=$PWD/../build-run/py/python timeout 200 python3 bench.py --passes bwd --only 1,2,3,5,6,7,9,10,11 \
    --out "$OUT/r$round" > "$OUT/r$round/log.txt" 2>&1
  echo "round $round: rc=$?"
  grep -E "^\| bf16" "$OUT/r$round/bench.md" | awk -F'|' '{print $3,$4,$5,$7,$8,$9,$12}'
done
