#!/usr/bin/env bash
# Session 14, call 10: the suite at 6be74aa read the D = 128 S = 2048 backward rows (plain and dense
# bias) ~0.6 ms slower than the CLI and the op did in calls 4-6. The same suite rows again, HEAD
# 4a2c8a4 (build-run/base, bnew) against 6be74aa (build-run/v2, bias2), twice, and the op's
# kernels per call (torch.profiler).
set -uo pipefail
for i in 1 2; do
  for side in base v2; do
    echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/bench.py --only 9,1 --passes bwd --iters 20 --out /tmp/b_$side 2>&1 | grep '^\[' | tr '\n' ' ')"
  done
  for side in bnew bias2; do
    echo "$side: $(PYTHONPATH=build-run/$side/python python3 bench/ab/s13_bias.py 2>&1 | tail -1)"
  done
done
for side in base v2; do
  echo "== profile $side plain"; PYTHONPATH=build-run/$side/python python3 bench/ab/s14_profile.py plain 2>&1 | sed -n '/^kernel/,/^GPU busy/p'
done
for side in bnew bias2; do
  echo "== profile $side bias"; PYTHONPATH=build-run/$side/python python3 bench/ab/s14_profile.py 2>&1 | sed -n '/^kernel/,/^GPU busy/p'
done
echo done
