#!/usr/bin/env bash
# Session 18 (for the next GPU session): the suite's bf16 backward rows D = 64/128/256 (bench.py
# rows 0-23, through the PyTorch op as the suite times them, seed/FA2/cuDNN beside) with branch
# s18-dq-first-store's Python module (build-run/s18py, b755983: its switches read by the C++ plan)
# and its switches off, then all on. The D = 256 S = 512 rows are where 4x the seed is asked.
set -uo pipefail
export PYTHONPATH=build-run/s18py/python:bench
for run in "off:MEMATTN_DQ_TICKETS=0" "all:MEMATTN_DQ_TICKETS=1 MEMATTN_ROTATE_STEPS=1 MEMATTN_DQ_FINISH=1"; do
  name=${run%%:*}
  mkdir -p "$OUT/suite_$name"
  env ${run#*:} timeout 280 python3 bench/bench.py --only "$(seq -s, 0 23)" --passes bwd --commit "s18-$name" \
    --out "$OUT/suite_$name" > "$OUT/suite_$name/log.txt" 2>&1
  echo "== $name"; grep -E "^\| bf16 \| (64|128|256) " "$OUT/suite_$name/bench.md" | head -24
done
