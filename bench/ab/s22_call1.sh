#!/usr/bin/env bash
# Session 22, call 1 (carry build-py, build-run/s21m): where the suite's D = 256 S = 512 backward
# spends its time beyond the kernels (host against GPU, torch.profiler's timeline, the kernels in
# the CLI), the suite's two rows, then the bulk-dQ branch's rows (s22_bulk_mma.sh).
set -uo pipefail
export PYTHONPATH=build-py/python:bench
B=build-py/bin/memattn
python3 -c "import memattn, memattn._ops as o; print('autograd module:', o._autograd is not None)"
timeout 120 python3 bench/ab/s22_host.py 2>&1 | grep -v Warning
timeout 120 python3 bench/ab/s15_timeline.py 32,8,512,256,1 32,8,512,256,0 2>&1 | grep -v Warning
for c in --causal ""; do
  echo "cli $c: $($B run --backend cuda --pass bwd --dtype bf16 --head-dim 256 --heads-q 8 --batch 32 --seqlen-q 512 $c --iters 30 --json 2>/dev/null | grep -o '"bwd_ms":[0-9.]*')"
done
timeout 150 python3 bench/bench.py --only 16,20 --passes bwd --iters 30 --out $OUT 2>&1 | grep -v Warning | tail -4
timeout 240 bash bench/ab/s22_bulk_mma.sh
