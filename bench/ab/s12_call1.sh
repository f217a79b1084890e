#!/usr/bin/env bash
# Session 12, call 1: where a synchronised backward call's time goes (the suite's method) for
# memattn's eager path against SDPA FLASH (torch.profiler timeline), and the CLI's kernel times,
# on the 12 plain D = 64/128 rows of a local build (build-run/base).
set -uo pipefail
B=build-run/base
PYTHONPATH=$B/python:bench timeout 200 python3 bench/ab/s12_timeline.py 2>&1 | grep -v Warning
for P in "--head-dim 128 --heads-q 16" "--head-dim 64 --heads-q 32"; do
  echo "$P: $($B/bin/memattn run --backend cuda --pass bwd --iters 20 --dtype bf16 --batch 8 --seqlen-q 2048 $P | grep -E '^backward:')"
done
echo done
